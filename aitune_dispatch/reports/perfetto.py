"""The run as a Chrome trace in Kineto's conventions, so that Perfetto, chrome://tracing and HTA read it.

What the trace draws (host spans, launch threads) is computed by :mod:`aitune_dispatch.results.views.trace`;
this writer only lays it out. Tracks, args, flows, pids and clocks: ``docs/design.md``, "The trace".
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..results.views import call_spans, launch_threads, module_labels, module_spans, op_spans
from ..results.views.clock import activity_minus_host_ns
from ..results.views.trace import is_gpu
from ..schema import GPU_PROPERTIES_KEY, HOST_KEY, RANK_COLUMN, RANK_METADATA_KEY
from .base import Renderer

if TYPE_CHECKING:
    from ..results import ProfileResult

GPU_CLOCK_OFFSET_KEY = schema.META_CLOCK_OFFSET  # written by the capture: activity clock − host clock
CPU_PID = 1
GPU_PID_BASE = 100
RANK_PID_STRIDE = 1000  # a merged result's rank r has the pids r * RANK_PID_STRIDE + (CPU_PID | GPU_PID_BASE + device)
FLOW_CAT = "ac2g"  # Kineto's name for launch-to-GPU flows
KINETO_CATS = {  # activity kind -> Kineto's category
    schema.KIND_KERNEL: "kernel",
    schema.KIND_MEMCPY: "gpu_memcpy",
    schema.KIND_MEMSET: "gpu_memset",
    schema.KIND_CPU_OP: "cpu_op",
}
LAUNCH_CATS = {schema.LAUNCH_API_RUNTIME: "cuda_runtime", schema.LAUNCH_API_DRIVER: "cuda_driver"}  # api -> cat
OS_THREAD_TID_BASE = 1_000_000  # tid = base + CUPTI thread id: launches on a thread no op ran on
DEVICE_PROPERTIES = {  # metadata key -> deviceProperties field
    schema.META_GPU_NAME: "name",
    schema.META_GPU_MEMORY: "totalGlobalMem",
    schema.META_GPU_SMS: "numSms",
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


def _pid(rank: int | None, base: int) -> int:
    return (rank or 0) * RANK_PID_STRIDE + base


def _is_gpu_pid(pid: int) -> bool:
    return pid % RANK_PID_STRIDE >= GPU_PID_BASE


def _module_slices(result: ProfileResult) -> list[Slice]:
    spans = module_spans(result).to_pydict()
    columns = (spans[name] for name in schema.MODULE_SPANS.names)
    return [
        Slice(_pid(rank, CPU_PID), _tid(thread), start, end, name, "module", {"module_id": mid, "module_type": kind})
        for mid, name, kind, start, end, thread, rank in zip(*columns)
    ]


def _call_slices(result: ProfileResult) -> list[Slice]:
    spans = call_spans(result).to_pydict()
    columns = (spans[name] for name in schema.CALL_SPANS.names)
    return [
        Slice(
            _pid(rank, CPU_PID),
            _tid(thread),
            start,
            end,
            name,
            "functional",
            {"call_id": cid, "module_id": mid, "module": module},
        )
        for cid, name, mid, module, start, end, thread, rank in zip(*columns)
    ]


def _op_slices(spans: dict[str, list[Any]], rows: list[dict[str, Any]]) -> list[Slice]:
    out = []
    cat = KINETO_CATS[schema.KIND_CPU_OP]
    columns = (spans[name] for name in schema.OP_SPANS.names)
    for op_id, name, call_id, module_id, start, end, thread, rank, activity_row in zip(*columns):
        args = {"External id": op_id, "op_id": op_id, "call_id": call_id, "module_id": module_id}
        if activity_row is not None:  # the CPU source's own row for this op: its name and time, once
            args |= {"kernel": rows[activity_row]["kernel"], "kernel_us": rows[activity_row]["kernel_us"]}
        out.append(Slice(_pid(rank, CPU_PID), _tid(thread), start, end, name, cat, args))
    return out


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
    "module_id",
    "module_name",
    "function_name",
    "thread",
]


def _activity_rows(result: ProfileResult) -> list[dict[str, Any]]:
    columns = _ACTIVITY_COLUMNS + ([RANK_COLUMN] if RANK_COLUMN in result.activity.column_names else [])
    return result.activity.select(columns).to_pylist()


def _activity_slices(
    rows: list[dict[str, Any]], offset_ns: int, op_rows: set[int], labels: dict[int, tuple[str, str]]
) -> list[Slice]:
    """One slice per activity row that is not its op's slice; ``module`` named as the module slices name it."""
    out = []
    for index, row in enumerate(rows):
        gpu = is_gpu(row["kind"], row["device"])
        if index in op_rows:
            continue
        shift = offset_ns if gpu else 0
        rank = row.get(RANK_COLUMN)
        pid = _pid(rank, GPU_PID_BASE + row["device"] if gpu else CPU_PID)
        tid = row["stream"] if gpu else _tid(row["thread"])
        args: dict[str, Any] = {
            "device": row["device"],
            "stream": row["stream"] if gpu else -1,
            "correlation": row["correlation_id"],
            **({} if row["op_id"] is None else {"External id": row["op_id"]}),
            "op": row["op"],
            "module": labels[row["module_id"]][0] if row["module_id"] in labels else row["module_name"],
            "function": row["function_name"],
            "kernel_us": row["kernel_us"],
        }
        cat = KINETO_CATS.get(row["kind"], row["kind"])
        out.append(Slice(pid, tid, row["start_ns"] - shift, row["end_ns"] - shift, row["kernel"], cat, args))
    return out


_LAUNCH_COLUMNS = ["correlation_id", "api", "cbid", "api_name", "start_ns", "end_ns", "os_thread"]


def _launch_slices(result: ProfileResult, offset_ns: int) -> list[Slice]:
    """One ``cuda_runtime`` / ``cuda_driver`` slice per launch record, on its thread's track."""
    if result.launches.num_rows == 0:
        return []
    columns = _LAUNCH_COLUMNS + ([RANK_COLUMN] if RANK_COLUMN in result.launches.column_names else [])
    rows = result.launches.select(columns).to_pylist()
    owners = launch_threads(result.activity, result.launches).to_pylist()
    out = []
    for row, owner in zip(rows, owners):
        rank, thread, op_id = row.get(RANK_COLUMN), owner["thread"], owner["op_id"]
        tid = _tid(thread) if thread is not None else OS_THREAD_TID_BASE + row["os_thread"]
        args: dict[str, Any] = {
            "cbid": row["cbid"],
            "correlation": row["correlation_id"],
            **({} if op_id is None else {"External id": op_id}),
            "os_thread": row["os_thread"],
        }
        start, end = row["start_ns"] - offset_ns, max(row["end_ns"], row["start_ns"]) - offset_ns
        cat = LAUNCH_CATS.get(row["api"], row["api"])
        out.append(Slice(_pid(rank, CPU_PID), tid, start, end, row["api_name"], cat, args))
    return out


def gpu_clock_offset(result: ProfileResult, gpu_clock_offset_ns: int | None = None) -> tuple[int, str]:
    """``(activity − host offset in ns, where it came from)`` for this result's GPU timestamps.

    Parameters
    ----------
    result:
        The result to lay out.
    gpu_clock_offset_ns:
        An offset the caller knows; None asks the result.

    Returns
    -------
    tuple[int, str]
        The offset subtracted from every GPU timestamp, and its source (kept in ``otherData``).
    """
    return activity_minus_host_ns(result.activity, result.ops, result.metadata, gpu_clock_offset_ns)


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


def _flows(launches: list[Slice], device: list[Slice], origin_ns: int) -> tuple[list[dict[str, Any]], int]:
    """Kineto ``ac2g`` arrows from each launch slice's start to the start of each GPU slice it launched."""
    by_launch: dict[tuple[int, int], Slice] = {}
    for launch in launches:
        by_launch.setdefault((launch.pid // RANK_PID_STRIDE, launch.args["correlation"]), launch)
    events: list[dict[str, Any]] = []
    skipped = 0
    for kernel in device:
        if not _is_gpu_pid(kernel.pid):
            continue
        launch = by_launch.get((kernel.pid // RANK_PID_STRIDE, kernel.args["correlation"]))
        if launch is None:
            continue
        if kernel.start_ns < launch.start_ns:  # the clocks disagree: an arrow would go back in time
            skipped += 1
            continue
        common = {"name": FLOW_CAT, "cat": FLOW_CAT, "id": len(events) // 2 + 1}
        ts = (launch.start_ns - origin_ns) / 1000.0
        events.append({"ph": "s", "pid": launch.pid, "tid": launch.tid, "ts": ts, **common})
        events.append(
            {"ph": "f", "bp": "e", "pid": kernel.pid, "tid": kernel.tid, "ts": (kernel.start_ns - origin_ns) / 1000.0}
            | common
        )
    return events, skipped


def _process_name(pid: int, hosts: dict[int, str] | None = None) -> str:
    """``CPU`` / ``GPU <d>``; in a merged result ``rank <r> CPU (<host>)`` / ``rank <r> GPU <d>``."""
    rank, local = divmod(pid, RANK_PID_STRIDE)
    name = "CPU" if local == CPU_PID else f"GPU {local - GPU_PID_BASE}"
    if hosts is None:
        return name
    host = hosts.get(rank, "") if local == CPU_PID else ""
    return f"rank {rank} {name}" + (f" ({host})" if host else "")


def _thread_name(pid: int, tid: int) -> str:
    if _is_gpu_pid(pid):
        return f"stream {tid}"
    return f"os thread {tid - OS_THREAD_TID_BASE}" if tid >= OS_THREAD_TID_BASE else f"thread {tid - 1}"


def _rank_hosts(result: ProfileResult) -> dict[int, str] | None:
    """``rank -> host`` of a merged result (None for an unmerged one: its processes keep plain names)."""
    if RANK_COLUMN not in result.activity.column_names:
        return None
    records = json.loads(result.metadata.get(RANK_METADATA_KEY) or "{}")
    return {int(rank): str(entry.get("metadata", {}).get(HOST_KEY, "")) for rank, entry in records.items()}


def _track_metadata(slices: Iterable[Slice], hosts: dict[int, str] | None = None) -> list[dict[str, Any]]:
    tracks = sorted({(piece.pid, piece.tid) for piece in slices})
    events: list[dict[str, Any]] = []
    for pid in sorted({pid for pid, _ in tracks}):
        name = _process_name(pid, hosts)
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}})
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}})
    for pid, tid in tracks:
        events.append(
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": _thread_name(pid, tid)}}
        )
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    return events


def _host_and_device(result: ProfileResult, offset_ns: int) -> tuple[list[Slice], list[Slice]]:
    rows = _activity_rows(result)
    spans = op_spans(result).to_pydict()
    op_rows = {row for row in spans["activity_row"] if row is not None}
    host = _module_slices(result) + _call_slices(result) + _op_slices(spans, rows)
    return host, _activity_slices(rows, offset_ns, op_rows, module_labels(result))


def _kineto_fields(facts: Mapping[str, Any]) -> dict[str, Any]:
    """``deviceProperties`` fields from ``gpu_name``, ``gpu_compute_capability``, ... entries."""
    known = {field: facts[key] for key, field in DEVICE_PROPERTIES.items() if key in facts}
    capability = str(facts.get(schema.META_GPU_CAPABILITY, ""))
    if "." in capability:
        major, minor = capability.split(".", 1)
        if major.isdigit() and minor.isdigit():
            known |= {"computeMajor": int(major), "computeMinor": int(minor)}
    for field in ("totalGlobalMem", "numSms"):
        if field in known and str(known[field]).isdigit():
            known[field] = int(known[field])
    return known


def device_properties(result: ProfileResult) -> list[dict[str, Any]]:
    """Kineto's ``deviceProperties`` for the GPUs of ``result``, from what its metadata names.

    Parameters
    ----------
    result:
        The result; its ``gpu_*`` metadata (per device in ``gpu_properties``) names the GPUs.

    Returns
    -------
    list[dict]
        One entry per GPU device in the activity (``id`` plus the known fields); empty when the
        metadata names none (CPU runs, results recorded before these keys).
    """
    if result.activity.num_rows == 0:
        return []
    shared = _kineto_fields(result.metadata)
    per_device = json.loads(result.metadata.get(GPU_PROPERTIES_KEY) or "{}")
    gpu = pc.filter(result.activity["device"], pc.greater_equal(result.activity["device"], 0))
    devices = sorted(d for d in pc.unique(gpu).to_pylist() if d is not None)
    entries = [{"id": device, **(_kineto_fields(per_device.get(str(device), {})) or shared)} for device in devices]
    return [entry for entry in entries if len(entry) > 1]


def distributed_info(result: ProfileResult) -> dict[str, Any] | None:
    """Kineto's ``distributedInfo`` of one rank's result; None for a run outside torch.distributed or a merge.

    Parameters
    ----------
    result:
        The result to lay out.

    Returns
    -------
    dict or None
        ``{"rank": r, "world_size": n, "backend": "nccl"}`` (the keys the metadata has; ``rank`` always).
    """
    rank = result.metadata.get(schema.RANK_KEY)
    if rank is None or RANK_COLUMN in result.activity.column_names or not str(rank).isdigit():
        return None
    info: dict[str, Any] = {"rank": int(rank)}
    world_size = str(result.metadata.get(schema.WORLD_SIZE_KEY, ""))
    if world_size.isdigit():
        info["world_size"] = int(world_size)
    if result.metadata.get(schema.DISTRIBUTED_BACKEND_KEY):
        info["backend"] = str(result.metadata[schema.DISTRIBUTED_BACKEND_KEY])
    return info


def perfetto_events(result: ProfileResult, *, gpu_clock_offset_ns: int | None = None) -> dict[str, Any]:
    """The run as a Chrome trace JSON object in Kineto's conventions.

    Parameters
    ----------
    result:
        The result to lay out.
    gpu_clock_offset_ns:
        CUPTI time minus host time; None takes it from the result.

    Returns
    -------
    dict
        ``{"schemaVersion", "traceEvents", "deviceProperties", "displayTimeUnit", "otherData"}``, and
        ``distributedInfo`` for one rank of a torch.distributed job (:func:`distributed_info`).
    """
    offset_ns, offset_source = gpu_clock_offset(result, gpu_clock_offset_ns)
    host, device = _host_and_device(result, offset_ns)
    launches = _launch_slices(result, offset_ns)
    slices = host + launches + device
    origin_ns = min((piece.start_ns for piece in slices), default=0)
    ordered = sorted(slices, key=lambda p: (p.pid, p.tid, p.start_ns, p.start_ns - p.end_ns))  # parents first
    flows, skipped = _flows(launches, device, origin_ns)
    events = _track_metadata(slices, _rank_hosts(result)) + [_complete(p, origin_ns) for p in ordered] + flows
    other = {
        "source": result.source,
        "gpu_clock_offset_ns": offset_ns,
        "gpu_clock_offset_source": offset_source,
        "time_origin_host_ns": origin_ns,
        "flows_skipped": skipped,
        **{f"metadata.{key}": str(value) for key, value in result.metadata.items()},
    }
    trace = {
        "schemaVersion": 1,
        "traceEvents": events,
        "deviceProperties": device_properties(result),
        "displayTimeUnit": "ms",
        "otherData": other,
    }
    info = distributed_info(result)
    if info is not None:
        trace["distributedInfo"] = info
    return trace


class PerfettoRenderer(Renderer):
    """Chrome trace JSON (Kineto's conventions); open it at ui.perfetto.dev, chrome://tracing or with HTA.

    Parameters
    ----------
    gpu_clock_offset_ns:
        CUPTI time minus host time; None takes it from the result.
    """

    extension = ".json"
    extensions = (".json", ".json.gz")
    default_name = "trace.json"

    def __init__(self, *, gpu_clock_offset_ns: int | None = None) -> None:
        self.gpu_clock_offset_ns = gpu_clock_offset_ns

    def render(self, result: ProfileResult) -> str:
        """The trace as compact JSON text, ``distributedInfo`` first with a space after ``"rank":`` (HTA's regex).

        Parameters
        ----------
        result:
            The result to lay out (:func:`perfetto_events`).

        Returns
        -------
        str
            The JSON text.
        """
        trace = perfetto_events(result, gpu_clock_offset_ns=self.gpu_clock_offset_ns)
        info = trace.pop("distributedInfo", None)
        body = json.dumps(trace, separators=(",", ":"), allow_nan=False, default=_json_default)
        if info is None:
            return body
        return json.dumps({"distributedInfo": info})[:-1] + "," + body[1:]

    def encode(self, text: str, path: Path) -> bytes:
        """UTF-8, gzip-compressed for a path ending in ``.gz``.

        Parameters
        ----------
        text:
            What :meth:`render` returned.
        path:
            The output file.

        Returns
        -------
        bytes
            The file's content (gzip with a zero timestamp, so that equal traces give equal files).
        """
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
