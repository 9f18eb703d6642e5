"""Chrome trace JSON (opens in Perfetto and chrome://tracing): the run on a timeline.

Host side, one process ``CPU``, one track per profiled thread: module forwards, functional calls
and aten ops as nested complete ("X") slices. Device side, one process ``GPU <device>`` per device,
one track per stream: kernels, memcpys and memsets. Flow arrows ("s" → "f", ``bp: "e"``) link
each op to the kernels it launched. With the CPU activity source the timed CPU ops go to their own
process ``CPU ops (activity source)``. Timestamps are µs (floats) after the earliest event.

Clocks: module, call and op times are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux); CUDA
activity times are CUPTI's. ``gpu_clock_offset_ns`` = CUPTI time − host time at one instant,
subtracted from every GPU timestamp. Taken from the argument, else from ``result.metadata[GPU_CLOCK_OFFSET_KEY]``,
else 0 (the same clock) when every kernel starts within a second after its op, else estimated as
the smallest kernel-start − op-start gap. ``otherData`` says which one was used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from .base import Renderer, module_labels, op_times

if TYPE_CHECKING:
    from ..results import ProfileResult

GPU_CLOCK_OFFSET_KEY = "activity_minus_host_ns"  # written by the profiler: activity clock − host clock
CPU_PID = 1
CPU_ACTIVITY_PID = 2
GPU_PID_BASE = 100
SAME_CLOCK_WINDOW_NS = 1_000_000_000
FLOW_NAME = "launch"


class Slice(NamedTuple):
    """One complete event before conversion: host-clock nanoseconds."""

    pid: int
    tid: int
    start_ns: int
    end_ns: int
    name: str
    cat: str
    args: dict[str, Any]


def _tid(thread: int | None) -> int:
    return (thread or 0) + 1  # recorder thread indexes start at 0; tid 0 reads as "idle" in viewers


def _is_gpu(kind: str | None, device: int | None) -> bool:
    return kind != "cpu_op" and device is not None and device >= 0


# -- host slices -----------------------------------------------------------------------------------------
def _module_slices(result: ProfileResult, labels: dict[int, tuple[str, str]]) -> list[Slice]:
    rows = result.module_calls.to_pydict()
    return [
        Slice(
            CPU_PID,
            _tid(thread),
            start,
            max(end, start),
            labels.get(mid, (str(mid), ""))[0],
            "module",
            {"module_id": mid, "module_type": labels.get(mid, ("", ""))[1]},
        )
        for mid, start, end, thread in zip(rows["module_id"], rows["start_ns"], rows["end_ns"], rows["thread"])
    ]


def _call_slices(result: ProfileResult, labels: dict[int, tuple[str, str]]) -> list[Slice]:
    rows = result.calls.to_pydict()
    fields = zip(
        rows["call_id"], rows["function_name"], rows["module_id"], rows["start_ns"], rows["end_ns"], rows["thread"]
    )
    return [
        Slice(
            CPU_PID,
            _tid(thread),
            start,
            max(end, start),
            name,
            "functional",
            {"call_id": cid, "module_id": mid, "module": labels.get(mid, ("", ""))[0]},
        )
        for cid, name, mid, start, end, thread in fields
    ]


def _op_slices(result: ProfileResult, timed: dict[int, tuple[int, int, int]]) -> list[Slice]:
    rows = result.ops.select(["op_id", "op", "call_id", "module_id"]).to_pydict()
    out = []
    for op_id, name, call_id, module_id in zip(rows["op_id"], rows["op"], rows["call_id"], rows["module_id"]):
        if op_id in timed:
            start, end, thread = timed[op_id]
            out.append(
                Slice(
                    CPU_PID,
                    _tid(thread),
                    start,
                    end,
                    name,
                    "op",
                    {"op_id": op_id, "call_id": call_id, "module_id": module_id},
                )
            )
    return out


def _op_time_map(result: ProfileResult) -> dict[int, tuple[int, int, int]]:
    rows = op_times(result).to_pydict()
    return {
        op_id: (start, end, thread or 0)
        for op_id, start, end, thread in zip(rows["op_id"], rows["start_ns"], rows["end_ns"], rows["thread"])
    }


# -- device slices -------------------------------------------------------------------------------------
def _activity_slices(result: ProfileResult, offset_ns: int) -> list[Slice]:
    names = [
        "correlation_id",
        "kernel",
        "kind",
        "start_ns",
        "end_ns",
        "kernel_us",
        "device",
        "stream",
        "op_id",
        "op",
        "module_name",
        "function_name",
        "thread",
    ]
    rows = result.activity.select(names).to_pylist()
    out = []
    for row in rows:
        gpu = _is_gpu(row["kind"], row["device"])
        shift = offset_ns if gpu else 0
        pid, tid = (GPU_PID_BASE + row["device"], row["stream"]) if gpu else (CPU_ACTIVITY_PID, _tid(row["thread"]))
        args = {key: row[key] for key in ("correlation_id", "op_id", "op", "module_name", "function_name", "kernel_us")}
        out.append(Slice(pid, tid, row["start_ns"] - shift, row["end_ns"] - shift, row["kernel"], row["kind"], args))
    return out


# -- clock offset --------------------------------------------------------------------------------------
def _launch_gaps(result: ProfileResult, timed: dict[int, tuple[int, int, int]]) -> list[int]:
    rows = result.activity.select(["kind", "device", "op_id", "start_ns"]).to_pydict()
    return [
        start - timed[op_id][0]
        for kind, device, op_id, start in zip(rows["kind"], rows["device"], rows["op_id"], rows["start_ns"])
        if _is_gpu(kind, device) and op_id in timed
    ]


def gpu_clock_offset(result: ProfileResult, gpu_clock_offset_ns: int | None = None) -> tuple[int, str]:
    """``(CUPTI − host offset in ns, where it came from)`` for this result's GPU timestamps."""
    if gpu_clock_offset_ns is not None:
        return int(gpu_clock_offset_ns), "argument"
    recorded = result.metadata.get(GPU_CLOCK_OFFSET_KEY)
    if recorded not in (None, ""):
        return int(recorded), f"metadata[{GPU_CLOCK_OFFSET_KEY!r}]"
    gaps = _launch_gaps(result, _op_time_map(result))
    if not gaps or all(0 <= gap <= SAME_CLOCK_WINDOW_NS for gap in gaps):
        return 0, "assumed: same clock"
    return min(gaps), "estimated: earliest kernel starts as its op starts"


# -- events --------------------------------------------------------------------------------------------
def _complete(piece: Slice, origin_ns: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "pid": piece.pid,
        "tid": piece.tid,
        "name": piece.name,
        "cat": piece.cat,
        "ts": (piece.start_ns - origin_ns) / 1000.0,
        "dur": (piece.end_ns - piece.start_ns) / 1000.0,
        "args": piece.args,
    }


def _midpoint(start_ns: int, end_ns: int) -> int:
    return start_ns + (end_ns - start_ns) // 2


def _flows(ops: list[Slice], kernels: list[Slice], origin_ns: int) -> list[dict[str, Any]]:
    by_op = {piece.args["op_id"]: piece for piece in ops}
    events: list[dict[str, Any]] = []
    for kernel in kernels:
        op = by_op.get(kernel.args["op_id"])
        if op is None:
            continue
        flow_id = len(events) // 2 + 1
        common = {"name": FLOW_NAME, "cat": "flow", "id": flow_id}
        start_ts = (_midpoint(op.start_ns, op.end_ns) - origin_ns) / 1000.0
        end_ts = (_midpoint(kernel.start_ns, kernel.end_ns) - origin_ns) / 1000.0
        events.append({"ph": "s", "pid": op.pid, "tid": op.tid, "ts": start_ts, **common})
        events.append({"ph": "f", "bp": "e", "pid": kernel.pid, "tid": kernel.tid, "ts": end_ts, **common})
    return events


def _process_name(pid: int) -> str:
    if pid == CPU_PID:
        return "CPU"
    if pid == CPU_ACTIVITY_PID:
        return "CPU ops (activity source)"
    return f"GPU {pid - GPU_PID_BASE}"


def _thread_name(pid: int, tid: int) -> str:
    return f"stream {tid}" if pid >= GPU_PID_BASE else f"thread {tid - 1}"


def _track_metadata(slices: Iterable[Slice]) -> list[dict[str, Any]]:
    tracks = sorted({(piece.pid, piece.tid) for piece in slices})
    events: list[dict[str, Any]] = []
    for pid in sorted({pid for pid, _ in tracks}):
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": _process_name(pid)}})
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}})
    for pid, tid in tracks:
        events.append(
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": _thread_name(pid, tid)}}
        )
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    return events


def _host_and_device(result: ProfileResult, offset_ns: int) -> tuple[list[Slice], list[Slice], list[Slice]]:
    labels = module_labels(result)
    ops = _op_slices(result, _op_time_map(result))
    host = _module_slices(result, labels) + _call_slices(result, labels) + ops
    return host, ops, _activity_slices(result, offset_ns)


def perfetto_events(result: ProfileResult, *, gpu_clock_offset_ns: int | None = None) -> dict[str, Any]:
    """The run as a Chrome trace JSON object (``{"traceEvents": [...], ...}``)."""
    offset_ns, offset_source = gpu_clock_offset(result, gpu_clock_offset_ns)
    host, ops, device = _host_and_device(result, offset_ns)
    slices = host + device
    origin_ns = min((piece.start_ns for piece in slices), default=0)
    ordered = sorted(slices, key=lambda p: (p.pid, p.tid, p.start_ns, p.start_ns - p.end_ns))  # parents first
    events = _track_metadata(slices) + [_complete(p, origin_ns) for p in ordered] + _flows(ops, device, origin_ns)
    other = {
        "source": result.source,
        "gpu_clock_offset_ns": offset_ns,
        "gpu_clock_offset_source": offset_source,
        "time_origin_host_ns": origin_ns,
        **{f"metadata.{key}": str(value) for key, value in result.metadata.items()},
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


class PerfettoRenderer(Renderer):
    """Chrome trace JSON; open it at ui.perfetto.dev or chrome://tracing."""

    extension = ".json"

    def __init__(self, *, gpu_clock_offset_ns: int | None = None) -> None:
        self.gpu_clock_offset_ns = gpu_clock_offset_ns

    def render(self, result: ProfileResult) -> str:
        """The trace as compact JSON text."""
        trace = perfetto_events(result, gpu_clock_offset_ns=self.gpu_clock_offset_ns)
        return json.dumps(trace, separators=(",", ":"), allow_nan=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, pa.Scalar):
        return value.as_py()
    return str(value)


def write_perfetto(result: ProfileResult, path: str | Path, *, gpu_clock_offset_ns: int | None = None) -> Path:
    """Write the run as Chrome trace JSON to ``path`` (open it in Perfetto) and return the path."""
    return PerfettoRenderer(gpu_clock_offset_ns=gpu_clock_offset_ns).write(result, path)
