"""The compiled decoder backend, whose CUPTI buffer callback copies records into C arrays without
Python or the GIL, and :func:`decode_buffer_py`, its pure-Python twin that the tests run every decoding
case through (``docs/design.md``, "Correlation: what CUPTI needs")."""

from __future__ import annotations

import ctypes
import functools
import operator
import re
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from . import libcupti
from .decoded import API_DRIVER, API_RUNTIME, KIND_MEMCPY, KIND_MEMSET, DecodedRecords, memcpy_name, memset_name

try:
    from . import _cupti_native as _native_module
except ImportError as error:  # not built: no compiler or no CUPTI headers at install time
    _native_module = None
    _NATIVE_IMPORT_ERROR: ImportError | None = error
else:
    _NATIVE_IMPORT_ERROR = None

# kernel name, (KIND_MEMCPY, copy_kind, src_kind, dst_kind) or (KIND_MEMSET, memory_kind)
NameEntry = str | tuple[int, ...]
# correlation_id, start_ns, end_ns, device, stream, kind_code, name_index, names, ext_correlation_id, ext_id,
# counters, then the API rows: api_correlation_id, api_kind, api_cbid, api_start_ns, api_end_ns, api_thread,
# then the activity rows' graph_id, graph_node_id (each addition after the last, so older positions stay)
RawRecords = tuple[
    bytes, bytes, bytes, bytes, bytes, bytes, bytes, list[NameEntry], bytes, bytes, dict[str, int],
    bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes,
]  # fmt: skip
COUNTERS = 10  # the counters' position in a raw decode
API_COLUMNS = slice(COUNTERS + 1, COUNTERS + 7)  # the API rows' six columns
GRAPH_COLUMNS = slice(COUNTERS + 7, COUNTERS + 9)  # the activity rows' graph_id, graph_node_id

KIND_SLOTS = 128  # activity kinds a record size can be given for: 0..127
MAX_RECORD_BYTES = 1 << 16
RECORD_ALIGN = 8
_NO_NAME_KEY = 3 << 56


def native_module() -> ModuleType:
    """The compiled extension, or an ImportError that says how to build it."""
    if _native_module is None:
        raise ImportError(
            f"aitune_dispatch.collection._cupti_native is not built ({_NATIVE_IMPORT_ERROR}); reinstall with a C "
            "compiler and CUPTI 12.6+ or 13.x headers present (pip install -e . with nvidia-cuda-cupti and "
            "nvidia-cuda-runtime 13.x, or nvidia-cuda-cupti-cu12 and nvidia-cuda-runtime-cu12 12.6+; see "
            "native_shims/README.md)"
        )
    return _native_module


def _load(module: ModuleType) -> str:
    """Open libcupti in the extension once (the one :mod:`.libcupti` picks); return its file."""
    library = module.library()
    return library if library is not None else module.load(libcupti.libcupti_path())


def loaded_module() -> ModuleType:
    """The compiled extension with libcupti resolved; raises where it is not built or libcupti will not load."""
    module = native_module()
    _load(module)
    return module


# zeroed buffers kept ready across collections: a pass's threads and CUPTI's own each fill one
POOLED_BUFFERS = 3


class NativeRecordSink:
    """Collects CUPTI records with the compiled decoder; one instance per activity session."""

    name = "native"

    def __init__(self, external_kind: int) -> None:
        self._native = native_module()
        self.library: str = _load(self._native)
        self._external_kind = int(external_kind)
        self.counters: dict[str, int] = {}
        self.warnings: tuple[str, ...] = ()  # what the last take() could not decode, in words
        # 0 and False: CUPTI zeroes each fresh buffer on the launching thread (benchmarks/fixed_cost.py)
        self.pooled_buffers = POOLED_BUFFERS
        self.zeroed_buffers = True

    def register(self) -> None:
        """Register the extension's buffer callbacks with CUPTI and forget older records.

        Zeroed buffers are faulted in first and CUPTI is told they come zeroed, so the pass's first
        launches do not zero 8 MiB (``docs/design.md``, "What a pass pays once").
        """
        self._native.prepare_buffers(self.pooled_buffers)
        self._native.buffers_zeroed(self.zeroed_buffers)
        self._native.register(self._external_kind)

    def release(self) -> None:
        """The collection is over (flushed, kinds disabled): CUPTI zeroes buffers again, as other clients expect."""
        self._native.buffers_zeroed(False)

    # -- launch correlation (docs/design.md, "Correlation: what CUPTI needs") ----------------------------
    launch_callbacks = True  # this backend holds the launch callback and the per-thread id stack

    def launch_callbacks_unavailable(self) -> str | None:
        """Why CUPTI's launch callbacks cannot be had (another subscriber, an old libcupti), or None."""
        return self._native.callbacks_unavailable()

    def correlation_functions(self) -> tuple[int, int]:
        """``(push, pop)``: the id stack's C entry points, with CUPTI's push / pop signatures."""
        return self._native.correlation_functions()

    def correlation_push(self, kind: int, external_id: int) -> None:
        """Push ``external_id`` on this thread's id stack."""
        self._native.correlation_push(kind, external_id)

    def correlation_pop(self, kind: int) -> int | None:
        """Pop this thread's id stack; the id, or None where it was empty."""
        return self._native.correlation_pop(kind)

    def start_launch_callbacks(self, runtime_cbids: list[int], driver_cbids: list[int], launch_rows: bool) -> None:
        """Empty every thread's id stack, then link each launch of these callback ids to the top of its thread's
        stack (and, with ``launch_rows``, record the call as an API record would); RuntimeError with CUPTI's error."""
        self._native.correlation_reset()
        self._native.launch_callbacks_start(runtime_cbids, driver_cbids, launch_rows)

    def stop_launch_callbacks(self) -> None:
        """Disable the launch callbacks and empty every thread's id stack (safe to call twice)."""
        try:
            self._native.launch_callbacks_stop()
        finally:
            self._native.correlation_reset()

    def take(self) -> DecodedRecords:
        """Every record delivered since :meth:`register`, as columns (call after a forced flush)."""
        raw = self._native.take()
        self.counters = dict(raw[COUNTERS])
        self.warnings = tuple(incomplete_messages(self.counters))
        for message in self.warnings:
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return to_decoded(raw)


def incomplete_messages(counters: Mapping[str, int]) -> list[str]:
    """One message per non-zero counter of what the decoder could not decode (the one place that words them)."""
    messages = []
    if counters.get("undecodable"):
        messages.append(
            f"the native CUPTI decoder could not walk {counters['undecodable']} buffer(s) to their end, so "
            "kernels may be missing; pass decoder='python' to compare and report the CUPTI version"
        )
    if counters.get("lost"):
        messages.append(f"the native CUPTI decoder ran out of memory and lost {counters['lost']} records")
    if counters.get("layout_mismatches"):
        messages.append(
            f"the native CUPTI decoder met {counters['layout_mismatches']} record(s) whose size differs from "
            "the layout it was compiled for; pass decoder='python' to compare and report the CUPTI version"
        )
    return messages


def _entry_name(entry: NameEntry) -> str:
    if isinstance(entry, str):
        return entry
    if entry[0] == KIND_MEMCPY:
        return memcpy_name(entry[1], entry[2], entry[3])
    return memset_name(entry[1])


def _resolve_names(entries: list[NameEntry]) -> tuple[list[str], np.ndarray | None]:
    """Distinct names in first-seen order, and the entry -> name index map (None if the identity)."""
    unique: dict[str, int] = {}
    lut = np.fromiter((unique.setdefault(_entry_name(e), len(unique)) for e in entries), np.int32, len(entries))
    return list(unique), None if len(unique) == len(entries) else lut


def to_decoded(raw: RawRecords) -> DecodedRecords:
    """Wrap a raw decode (extension or twin) into :class:`DecodedRecords` without copying the columns."""
    cid, start, end, device, stream, kind, name_index, entries, ext_cid, ext_id, counters = raw[: COUNTERS + 1]
    # an extension built before the API or the graph columns returns fewer entries: those read as empty
    api_cid, api_kind, api_cbid, api_start, api_end, api_thread = (
        raw[API_COLUMNS] if len(raw) >= API_COLUMNS.stop else (b"",) * 6
    )
    graph_id, graph_node_id = raw[GRAPH_COLUMNS] if len(raw) >= GRAPH_COLUMNS.stop else (b"", b"")
    names, lut = _resolve_names(entries)
    index = np.frombuffer(name_index, np.int32)
    return DecodedRecords(
        correlation_id=np.frombuffer(cid, np.int64),
        start_ns=np.frombuffer(start, np.int64),
        end_ns=np.frombuffer(end, np.int64),
        device=np.frombuffer(device, np.int64),
        stream=np.frombuffer(stream, np.int64),
        kind_code=np.frombuffer(kind, np.int8),
        name_index=index if lut is None else lut[index],
        names=names,
        ext_correlation_id=np.frombuffer(ext_cid, np.int64),
        ext_id=np.frombuffer(ext_id, np.int64),
        records=int(counters["records"]),
        api_correlation_id=np.frombuffer(api_cid, np.int64),
        api_kind=np.frombuffer(api_kind, np.int8),
        api_cbid=np.frombuffer(api_cbid, np.int32),
        api_start_ns=np.frombuffer(api_start, np.int64),
        api_end_ns=np.frombuffer(api_end, np.int64),
        api_thread=np.frombuffer(api_thread, np.int64),
        graph_id=np.frombuffer(graph_id, np.int64),
        graph_node_id=np.frombuffer(graph_node_id, np.int64),
    )


# -- the pure-Python twin of _cupti_native.decode_buffer ---------------------------------------------


class _Layout(NamedTuple):
    role: str  # "kernel", "memcpy", "memset", "correlation", "runtime" or "driver"
    size: int  # the whole record, in bytes
    fields: np.dtype  # the fields decoded, at their offsets (its itemsize: the bytes read)


_GRAPH = ("graph_id", "graph_node_id")
_FIELDS = {
    "kernel": ("start", "end", "device_id", "stream_id", "correlation_id", "name", *_GRAPH),
    "memcpy": (
        "copy_kind", "src_kind", "dst_kind", "start", "end", "device_id", "stream_id", "correlation_id", *_GRAPH
    ),
    "memset": ("memory_kind", "start", "end", "device_id", "stream_id", "correlation_id", *_GRAPH),
    "correlation": ("external_kind", "external_id", "correlation_id"),
    "runtime": ("cbid", "start", "end", "thread_id", "correlation_id"),
    "driver": ("cbid", "start", "end", "thread_id", "correlation_id"),
}
_API_CODES = {"runtime": API_RUNTIME, "driver": API_DRIVER}


def _subset(dtype: np.dtype, names: tuple[str, ...]) -> np.dtype:
    fields = [dtype.fields[n] for n in names]
    end = max(offset + fmt.itemsize for fmt, offset, *_ in fields)
    return np.dtype(
        {"names": list(names), "formats": [f[0] for f in fields], "offsets": [f[1] for f in fields], "itemsize": end}
    )


def cupti_dtype(cupti: Any, stem: str) -> np.dtype:
    """cupti-python's record dtype ``<stem><N>`` with the highest N (none for the unversioned ``api``):
    ``activity_kernel10_dtype`` in cupti-python 13, ``c_upti_activity_kernel9_dtype`` in 12.x."""
    pattern = re.compile(rf"^(?:c_upti_)?activity_{re.escape(stem)}(\d*)_dtype$")
    found = {int(m.group(1) or 0): n for n in dir(cupti) if (m := pattern.match(n))}
    if not found:
        raise AttributeError(
            f"cupti-python {libcupti.cupti_python_version()} publishes no activity_{stem}*_dtype record dtype; "
            f"install the cupti-python of your torch's CUDA major: {libcupti.install_hint(libcupti.torch_cuda_major())}"
        )
    return getattr(cupti, found[max(found)])


# CUpti_ActivityKind codes, the same in CUPTI 12 and 13 (tests/test_native_decoder.py checks them)
KINDS = {"kernel": 3, "concurrent_kernel": 10, "memcpy": 1, "memset": 2, "correlation": 39, "runtime": 5, "driver": 4}
# The fields read, at their offsets and formats, per record; the same in CUPTI 12.6+ and 13.x. The
# compiled decoder asserts these offsets against the headers it was built with (KERNEL_START.. in
# native_shims/cupti_decoder.c); the tests compare them with record_offsets() and cupti-python's dtypes.
FIELD_LAYOUTS: dict[str, dict[str, tuple[int, str]]] = {
    "kernel": {
        "start": (16, "<u8"), "end": (24, "<u8"), "device_id": (40, "<u4"), "stream_id": (48, "<u4"),
        "correlation_id": (92, "<u4"), "name": (104, "<i8"), "graph_node_id": (144, "<u8"), "graph_id": (156, "<u4"),
    },
    "memcpy": {
        "copy_kind": (4, "|u1"), "src_kind": (5, "|u1"), "dst_kind": (6, "|u1"), "start": (16, "<u8"),
        "end": (24, "<u8"), "device_id": (32, "<u4"), "stream_id": (40, "<u4"), "correlation_id": (44, "<u4"),
        "graph_node_id": (64, "<u8"), "graph_id": (72, "<u4"),
    },
    "memset": {
        "memory_kind": (50, "<u2"), "start": (16, "<u8"), "end": (24, "<u8"), "device_id": (32, "<u4"),
        "stream_id": (40, "<u4"), "correlation_id": (44, "<u4"), "graph_node_id": (64, "<u8"), "graph_id": (72, "<u4"),
    },
    "correlation": {"external_kind": (4, "<i4"), "external_id": (8, "<u8"), "correlation_id": (16, "<u4")},
    "api": {"cbid": (4, "<u4"), "start": (8, "<u8"), "end": (16, "<u8"), "thread_id": (28, "<u4"),
            "correlation_id": (32, "<u4")},
}  # fmt: skip
# Whole-record sizes per CUPTI major: only the kernel record differs (Kernel9, 208 bytes, in 12.x;
# Kernel10, 216, in 13.x).
RECORD_BYTES: dict[int, dict[str, int]] = {
    12: {"kernel": 208, "memcpy": 96, "memset": 88, "correlation": 24, "api": 40},
    13: {"kernel": 216, "memcpy": 96, "memset": 88, "correlation": 24, "api": 40},
}
_ROLE_RECORD = {"kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "correlation": "correlation",
                "runtime": "api", "driver": "api"}  # fmt: skip
_ROLE_KINDS = {"kernel": ("kernel", "concurrent_kernel"), "memcpy": ("memcpy",), "memset": ("memset",),
               "correlation": ("correlation",), "runtime": ("runtime",), "driver": ("driver",)}  # fmt: skip


def record_dtype(record: str, cupti_major: int) -> np.dtype:
    """A whole record (``"kernel"``, ``"memcpy"``, ``"memset"``, ``"correlation"``, ``"api"``) of a CUPTI
    major's layout with only the fields read named, for decoding and for building synthetic buffers."""
    if cupti_major not in RECORD_BYTES:
        raise ValueError(f"cupti_major: no record layout for CUPTI {cupti_major}; the decoder knows 12 and 13")
    fields = {"kind": (0, "<i4"), **FIELD_LAYOUTS[record]}
    return np.dtype(
        {
            "names": list(fields),
            "formats": [fmt for _, fmt in fields.values()],
            "offsets": [offset for offset, _ in fields.values()],
            "itemsize": RECORD_BYTES[cupti_major][record],
        }
    )


@functools.cache
def record_layouts(cupti_major: int | None = None) -> dict[int, _Layout]:
    """Record layouts by activity kind: with ``cupti_major`` (12 or 13) from the explicit tables above,
    else from the record dtypes of the installed cupti-python (named in either of its schemes)."""
    if cupti_major is not None:
        by_record = {record: record_dtype(record, cupti_major) for record in FIELD_LAYOUTS}
        kinds = KINDS
    else:
        from cupti import cupti

        by_record = {
            "kernel": cupti_dtype(cupti, "kernel"),
            "memcpy": cupti_dtype(cupti, "memcpy"),
            "memset": cupti_dtype(cupti, "memset"),
            "correlation": cupti_dtype(cupti, "external_correlation"),
            "api": cupti_dtype(cupti, "api"),
        }
        names = {"concurrent_kernel": "CONCURRENT_KERNEL", "correlation": "EXTERNAL_CORRELATION"}
        kinds = {key: int(getattr(cupti.ActivityKind, names.get(key, key.upper()))) for key in KINDS}
    layouts = {}
    for role, record in _ROLE_RECORD.items():
        dtype = by_record[record]
        for key in _ROLE_KINDS[role]:
            layouts[kinds[key]] = _Layout(role, dtype.itemsize, _subset(dtype, _FIELDS[role]))
    return layouts


def _record_sizes(layouts: Mapping[int, _Layout], record_sizes: Mapping[int, int] | None) -> dict[int, int]:
    """Default sizes updated from ``record_sizes``, validated as the extension validates them."""
    sizes = {kind: layout.size for kind, layout in layouts.items()}
    if record_sizes is None:
        return sizes
    if not isinstance(record_sizes, dict):
        raise TypeError("record_sizes must be a dict {activity kind: record bytes} or None")
    for kind, size in record_sizes.items():
        kind, size = operator.index(kind), operator.index(size)
        if not 0 <= kind < KIND_SLOTS:
            raise ValueError(f"record_sizes: activity kind {kind} is outside 0..{KIND_SLOTS - 1}")
        least = layouts[kind].fields.itemsize if kind in layouts else 4
        if size != 0 and not least <= size <= MAX_RECORD_BYTES:
            raise ValueError(
                f"record_sizes: record size {size} for kind {kind} must be 0 or between {least} and "
                f"{MAX_RECORD_BYTES} bytes; take it from the cupti-python dtype of that record"
            )
        sizes[kind] = size
    return sizes


class _TwinColumns:
    """Columns built one record at a time, in the extension's raw layout."""

    def __init__(self, external_kind: int) -> None:
        self.external_kind = external_kind
        self.rows: list[tuple[int, ...]] = []
        self.links: list[tuple[int, int]] = []
        self.calls: list[tuple[int, int, int, int, int, int]] = []  # API rows, in the raw column order
        self.keys: dict[Any, int] = {}
        self.entries: list[NameEntry] = []
        self.records = 0
        self.undecodable = 0

    def intern(self, key: Any, entry: NameEntry) -> int:
        if key not in self.keys:
            self.keys[key] = len(self.entries)
            self.entries.append(entry)
        return self.keys[key]

    def add(self, layout: _Layout | None, record: np.void) -> None:
        self.records += 1
        role = layout.role if layout else "counted only"
        if role in _API_CODES:
            fields = (record["correlation_id"], _API_CODES[role], record["cbid"], record["start"], record["end"])
            self.calls.append((*(int(f) for f in fields), int(record["thread_id"])))
            return
        if role == "correlation":
            if int(record["external_kind"]) == self.external_kind:
                self.links.append((int(record["correlation_id"]), int(record["external_id"])))
            return
        if role == "kernel":
            pointer = int(record["name"]) & (2**64 - 1)
            text = ctypes.string_at(pointer).decode("utf-8", "replace") if pointer else ""
            kind, name = 0, self.intern(pointer or _NO_NAME_KEY, text)
        elif role == "memcpy":
            codes = (int(record["copy_kind"]), int(record["src_kind"]), int(record["dst_kind"]))
            kind, name = KIND_MEMCPY, self.intern(("memcpy", *codes), (KIND_MEMCPY, *codes))
        elif role == "memset":
            code = int(record["memory_kind"])
            kind, name = KIND_MEMSET, self.intern(("memset", code), (KIND_MEMSET, code))
        else:
            return
        fields = (record["correlation_id"], record["start"], record["end"], record["device_id"], record["stream_id"])
        graph = (int(record["graph_id"]), int(record["graph_node_id"]))
        self.rows.append((*(int(f) for f in fields), kind, name, *graph))

    def raw(self) -> RawRecords:
        rows = np.array(self.rows, dtype=np.uint64).reshape(len(self.rows), 9)
        links = np.array(self.links, dtype=np.uint64).reshape(len(self.links), 2)
        calls = np.array(self.calls, dtype=np.uint64).reshape(len(self.calls), 6)

        def column(values: np.ndarray, dtype: type) -> bytes:
            return np.ascontiguousarray(values).view(np.int64).astype(dtype).tobytes()

        counters = {"records": self.records, "undecodable": self.undecodable, "lost": 0, "layout_mismatches": 0}
        columns = [column(rows[:, i], np.int64) for i in range(5)]
        return (
            *columns,
            column(rows[:, 5], np.int8),
            column(rows[:, 6], np.int32),
            list(self.entries),
            column(links[:, 0], np.int64),
            column(links[:, 1], np.int64),
            counters,
            column(calls[:, 0], np.int64),
            column(calls[:, 1], np.int8),
            column(calls[:, 2], np.int32),
            *(column(calls[:, i], np.int64) for i in range(3, 6)),
            column(rows[:, 7], np.int64),
            column(rows[:, 8], np.int64),
        )  # type: ignore[return-value]


def decode_buffer_py(
    buffer: bytes | bytearray | memoryview,
    external_kind: int,
    record_sizes: dict[int, int] | None = None,
    cupti_major: int | None = None,
) -> RawRecords:
    """Pure-Python twin of ``_cupti_native.decode_buffer``: the same sized walk, the same output.

    ``cupti_major`` (12 or 13) picks that CUPTI's record layout; None, the installed cupti-python's."""
    layouts = record_layouts(cupti_major)
    sizes = _record_sizes(layouts, record_sizes)
    data = memoryview(buffer).cast("B").tobytes()
    columns = _TwinColumns(int(external_kind))
    offset = 0
    while offset < len(data):
        if len(data) - offset < 4:
            columns.undecodable += 1
            break
        kind = int.from_bytes(data[offset : offset + 4], "little")
        size = sizes.get(kind, 0)
        if not size or size > len(data) - offset:
            columns.undecodable += 1
            break
        layout = layouts.get(kind)
        fields = layout.fields if layout else np.dtype([("kind", "<i4")])
        columns.add(layout, np.frombuffer(data, fields, count=1, offset=offset)[0])
        offset += -(-size // RECORD_ALIGN) * RECORD_ALIGN
    return columns.raw()
