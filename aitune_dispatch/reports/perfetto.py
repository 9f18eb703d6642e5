"""Chrome trace JSON in Kineto's conventions: opens in Perfetto, chrome://tracing and HTA.

Host side, one process ``CPU``, one track per profiled thread: module forwards (``cat: "module"``),
functional calls (``cat: "functional"``) and aten ops (``cat: "cpu_op"``, args ``External id`` =
op id) as nested complete ("X") slices. Device side, one process ``GPU <device>`` per device, one
track per stream: kernels (``cat: "kernel"``), memcpys (``"gpu_memcpy"``) and memsets
(``"gpu_memset"``), each with the args Kineto writes and HolisticTraceAnalysis reads: ``device``,
``stream``, ``correlation`` (the CUPTI correlation id) and ``External id`` (the launching op's id),
plus ours (``op``, ``module``, ``function``). A flow arrow (``cat: "ac2g"``, ``s`` → ``f`` with
``bp: "e"``) leads from each op to each kernel it launched, starting where the op starts and ending
where the kernel starts, so no arrow goes back in time (a kernel that starts before its op on the
mapped clock gets no arrow; ``otherData.flows_skipped`` counts them). The collector keeps no
runtime/driver API records, so the trace has no ``cuda_runtime`` launch slices: arrows start on the
op. ``deviceProperties`` lists the GPUs whose properties the result's metadata names
(``gpu_name``, ``gpu_compute_capability``, ``gpu_memory_bytes``, ``gpu_sm_count``).

With the CPU activity source each op is written once, as its ``cpu_op`` slice on its thread (the
op's measured time; the activity row's name is in ``args.kernel``), with no GPU tracks and no
arrows. Timestamps are µs (floats) after the earliest event. A path ending in ``.gz`` is written
gzip-compressed.

Clocks: module, call and op times are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux); CUDA
activity times are CUPTI's. ``gpu_clock_offset_ns`` = CUPTI time − host time at one instant,
subtracted from every GPU timestamp. Taken from the argument, else from ``result.metadata[GPU_CLOCK_OFFSET_KEY]``,
else 0 (the same clock) when every kernel starts within a second after its op, else estimated as
the smallest kernel-start − op-start gap. ``otherData`` says which one was used.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from .base import Renderer, module_labels, op_times

if TYPE_CHECKING:
    from ..results import ProfileResult

GPU_CLOCK_OFFSET_KEY = "activity_minus_host_ns"  # written by the profiler: activity clock − host clock
CPU_PID = 1
GPU_PID_BASE = 100
SAME_CLOCK_WINDOW_NS = 1_000_000_000
FLOW_CAT = "ac2g"  # Kineto's name for launch-to-GPU flows
KINETO_CATS = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "cpu_op": "cpu_op"}
DEVICE_PROPERTIES = {  # metadata key -> deviceProperties field
    "gpu_name": "name",
    "gpu_memory_bytes": "totalGlobalMem",
    "gpu_sm_count": "numSms",
}


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
        if start or end  # calls attributed from compiled code or a graph capture are not timed (0, 0)
    ]


def _op_slices(
    result: ProfileResult, timed: dict[int, tuple[int, int, int]], cpu_rows: dict[int, dict[str, Any]]
) -> list[Slice]:
    rows = result.ops.select(["op_id", "op", "call_id", "module_id"]).to_pydict()
    out = []
    for op_id, name, call_id, module_id in zip(rows["op_id"], rows["op"], rows["call_id"], rows["module_id"]):
        if op_id in timed:
            start, end, thread = timed[op_id]
            args = {"External id": op_id, "op_id": op_id, "call_id": call_id, "module_id": module_id}
            if op_id in cpu_rows:  # the CPU source's own row for this op: its name and time, once
                args |= {"kernel": cpu_rows[op_id]["kernel"], "kernel_us": cpu_rows[op_id]["kernel_us"]}
            out.append(Slice(CPU_PID, _tid(thread), start, end, name, "cpu_op", args))
    return out


def _op_time_map(result: ProfileResult) -> dict[int, tuple[int, int, int]]:
    rows = op_times(result).to_pydict()
    return {
        op_id: (start, end, thread or 0)
        for op_id, start, end, thread in zip(rows["op_id"], rows["start_ns"], rows["end_ns"], rows["thread"])
    }


# -- device slices -------------------------------------------------------------------------------------
_ACTIVITY_COLUMNS = [
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


def _activity_rows(result: ProfileResult) -> list[dict[str, Any]]:
    return result.activity.select(_ACTIVITY_COLUMNS).to_pylist()


def _cpu_rows_by_op(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The CPU source's activity rows that stand for an op (written once, as the op's slice)."""
    return {row["op_id"]: row for row in rows if row["kind"] == "cpu_op" and row["op_id"] is not None}


def _activity_slices(rows: list[dict[str, Any]], offset_ns: int, cpu_ops: dict[int, dict[str, Any]]) -> list[Slice]:
    out = []
    for row in rows:
        gpu = _is_gpu(row["kind"], row["device"])
        if not gpu and row["op_id"] in cpu_ops and cpu_ops[row["op_id"]] is row:
            continue  # already the op's slice
        shift = offset_ns if gpu else 0
        pid, tid = (GPU_PID_BASE + row["device"], row["stream"]) if gpu else (CPU_PID, _tid(row["thread"]))
        args: dict[str, Any] = {
            "device": row["device"],
            "stream": row["stream"] if gpu else -1,
            "correlation": row["correlation_id"],
            **({} if row["op_id"] is None else {"External id": row["op_id"]}),
            "op": row["op"],
            "module": row["module_name"],
            "function": row["function_name"],
            "kernel_us": row["kernel_us"],
        }
        cat = KINETO_CATS.get(row["kind"], row["kind"])
        out.append(Slice(pid, tid, row["start_ns"] - shift, row["end_ns"] - shift, row["kernel"], cat, args))
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


def _flows(ops: list[Slice], kernels: list[Slice], origin_ns: int) -> tuple[list[dict[str, Any]], int]:
    """Kineto ``ac2g`` arrows from each op's start to the start of each GPU slice it launched."""
    by_op = {piece.args["op_id"]: piece for piece in ops}
    events: list[dict[str, Any]] = []
    skipped = 0
    for kernel in kernels:
        op = by_op.get(kernel.args.get("External id")) if kernel.pid >= GPU_PID_BASE else None
        if op is None:
            continue
        if kernel.start_ns < op.start_ns:  # the clocks disagree: an arrow would go back in time
            skipped += 1
            continue
        common = {"name": FLOW_CAT, "cat": FLOW_CAT, "id": len(events) // 2 + 1}
        events.append({"ph": "s", "pid": op.pid, "tid": op.tid, "ts": (op.start_ns - origin_ns) / 1000.0, **common})
        events.append(
            {"ph": "f", "bp": "e", "pid": kernel.pid, "tid": kernel.tid, "ts": (kernel.start_ns - origin_ns) / 1000.0}
            | common
        )
    return events, skipped


def _process_name(pid: int) -> str:
    return "CPU" if pid == CPU_PID else f"GPU {pid - GPU_PID_BASE}"


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
    rows = _activity_rows(result)
    cpu_ops = _cpu_rows_by_op(rows)
    ops = _op_slices(result, _op_time_map(result), cpu_ops)
    timed = {piece.args["op_id"] for piece in ops}
    cpu_ops = {op_id: row for op_id, row in cpu_ops.items() if op_id in timed}  # an untimed op keeps its row
    host = _module_slices(result, labels) + _call_slices(result, labels) + ops
    return host, ops, _activity_slices(rows, offset_ns, cpu_ops)


def device_properties(result: ProfileResult) -> list[dict[str, Any]]:
    """Kineto's ``deviceProperties`` for the GPUs of ``result``, from what its metadata names.

    Parameters
    ----------
    result:
        The result; its ``metadata`` may hold ``gpu_name``, ``gpu_compute_capability`` (``"9.0"``),
        ``gpu_memory_bytes`` and ``gpu_sm_count`` (written by the profiler on CUDA runs).

    Returns
    -------
    list[dict]
        One entry per GPU device in the activity (``id`` plus the known fields); empty when the
        metadata names none of them (results recorded before these keys existed, CPU runs).
    """
    known = {field: result.metadata[key] for key, field in DEVICE_PROPERTIES.items() if key in result.metadata}
    capability = str(result.metadata.get("gpu_compute_capability", ""))
    if "." in capability:
        major, minor = capability.split(".", 1)
        if major.isdigit() and minor.isdigit():
            known |= {"computeMajor": int(major), "computeMinor": int(minor)}
    if not known or result.activity.num_rows == 0:
        return []
    for field in ("totalGlobalMem", "numSms"):
        if field in known and str(known[field]).isdigit():
            known[field] = int(known[field])
    gpu = pc.filter(result.activity["device"], pc.greater_equal(result.activity["device"], 0))
    devices = sorted(d for d in pc.unique(gpu).to_pylist() if d is not None)
    return [{"id": device, **known} for device in devices]


def perfetto_events(result: ProfileResult, *, gpu_clock_offset_ns: int | None = None) -> dict[str, Any]:
    """The run as a Chrome trace JSON object in Kineto's conventions.

    Parameters
    ----------
    result:
        The result to lay out.
    gpu_clock_offset_ns:
        CUPTI time minus host time; None takes it from the metadata or estimates it (module docstring).

    Returns
    -------
    dict
        ``{"schemaVersion", "traceEvents", "deviceProperties", "displayTimeUnit", "otherData"}``.
    """
    offset_ns, offset_source = gpu_clock_offset(result, gpu_clock_offset_ns)
    host, ops, device = _host_and_device(result, offset_ns)
    slices = host + device
    origin_ns = min((piece.start_ns for piece in slices), default=0)
    ordered = sorted(slices, key=lambda p: (p.pid, p.tid, p.start_ns, p.start_ns - p.end_ns))  # parents first
    flows, skipped = _flows(ops, device, origin_ns)
    events = _track_metadata(slices) + [_complete(p, origin_ns) for p in ordered] + flows
    other = {
        "source": result.source,
        "gpu_clock_offset_ns": offset_ns,
        "gpu_clock_offset_source": offset_source,
        "time_origin_host_ns": origin_ns,
        "flows_skipped": skipped,
        **{f"metadata.{key}": str(value) for key, value in result.metadata.items()},
    }
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "deviceProperties": device_properties(result),
        "displayTimeUnit": "ms",
        "otherData": other,
    }


class PerfettoRenderer(Renderer):
    """Chrome trace JSON (Kineto's conventions); open it at ui.perfetto.dev, chrome://tracing or with HTA.

    Parameters
    ----------
    gpu_clock_offset_ns:
        CUPTI time minus host time; None takes it from the result (see the module docstring).
    """

    extension = ".json"
    extensions = (".json", ".json.gz")

    def __init__(self, *, gpu_clock_offset_ns: int | None = None) -> None:
        self.gpu_clock_offset_ns = gpu_clock_offset_ns

    def render(self, result: ProfileResult) -> str:
        """The trace as compact JSON text."""
        trace = perfetto_events(result, gpu_clock_offset_ns=self.gpu_clock_offset_ns)
        return json.dumps(trace, separators=(",", ":"), allow_nan=False, default=_json_default)

    def encode(self, text: str, path: Path) -> bytes:
        """UTF-8, gzip-compressed for a path ending in ``.gz``."""
        data = text.encode("utf-8")
        return gzip.compress(data, mtime=0) if path.name.lower().endswith(".gz") else data


def _json_default(value: Any) -> Any:
    if isinstance(value, pa.Scalar):
        return value.as_py()
    return str(value)


def write_perfetto(result: ProfileResult, path: str | Path, *, gpu_clock_offset_ns: int | None = None) -> Path:
    """Write the run as a Chrome trace (Kineto's conventions) and return the path.

    Parameters
    ----------
    result:
        The result to write.
    path:
        The output file, ending in ``.json`` or ``.json.gz`` (gzip-compressed).
    gpu_clock_offset_ns:
        CUPTI time minus host time; None takes it from the result.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    return PerfettoRenderer(gpu_clock_offset_ns=gpu_clock_offset_ns).write(result, path)
