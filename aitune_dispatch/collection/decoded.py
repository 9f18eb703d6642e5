"""Decoded CUPTI records as columns and their conversion to the Arrow schemas, shared by both decoders
so they can differ only in what they decode, which the GPU tests compare."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .. import encoded, schema

# activity kinds of the decoded rows (``kind_code``), and the ``kind`` each becomes
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET = 0, 1, 2
KIND_NAMES = (schema.KIND_KERNEL, schema.KIND_MEMCPY, schema.KIND_MEMSET)
# the CUDA API of a decoded API record (``api_kind``): CUPTI_ACTIVITY_KIND_RUNTIME / _DRIVER
API_RUNTIME, API_DRIVER = 0, 1
API_NAMES = (schema.LAUNCH_API_RUNTIME, schema.LAUNCH_API_DRIVER)

# CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind, as torch.profiler prints them
_COPY_KINDS = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP")
_MEMORY_KINDS = ("Unknown", "Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static")


def memcpy_name(copy_kind: int, src_kind: int, dst_kind: int) -> str:
    """``Memcpy HtoD (Pinned -> Device)``: the name torch.profiler gives a copy."""

    def pick(table: tuple[str, ...], code: int) -> str:
        return table[code] if 0 <= code < len(table) else "Unknown"

    return f"Memcpy {pick(_COPY_KINDS, copy_kind)} ({pick(_MEMORY_KINDS, src_kind)} -> {pick(_MEMORY_KINDS, dst_kind)})"


def memset_name(memory_kind: int) -> str:
    """``Memset (Device)``: the name torch.profiler gives a memset."""
    return f"Memset ({_MEMORY_KINDS[memory_kind] if 0 <= memory_kind < len(_MEMORY_KINDS) else 'Unknown'})"


def _no_rows(dtype: type) -> np.ndarray:
    return np.empty(0, dtype)


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> tuple[object, object] | None:
    """``__cxa_demangle`` and ``free`` from the C++ runtime torch already loaded, or None."""
    try:
        runtime = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(None)
        demangle = runtime.__cxa_demangle
    except (OSError, AttributeError):
        return None
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    demangle.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    return demangle, libc.free


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The kernel name as torch.profiler shows it: C++ names demangled, others unchanged."""
    functions = _cxa_demangle() if name.startswith("_Z") else None
    if functions is None:
        return name
    demangle_fn, free = functions
    status = ctypes.c_int(0)
    pointer = demangle_fn(name.encode(), None, None, ctypes.byref(status))  # type: ignore[operator]
    if not pointer:
        return name
    try:
        return ctypes.string_at(pointer).decode(errors="replace") if status.value == 0 else name
    finally:
        free(pointer)  # type: ignore[operator]


@dataclass(frozen=True)
class DecodedRecords:
    """Columns decoded from CUPTI buffers: activity rows (``name_index`` into ``names``; ``graph_id`` /
    ``graph_node_id`` empty where a decoder predates them, read as 0), correlation rows already filtered
    to our kind, and API rows; ``records`` counts every record seen."""

    correlation_id: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    kind_code: np.ndarray
    name_index: np.ndarray
    names: list[str]
    ext_correlation_id: np.ndarray
    ext_id: np.ndarray
    records: int
    api_correlation_id: np.ndarray = field(default_factory=lambda: _no_rows(np.int64))
    api_kind: np.ndarray = field(default_factory=lambda: _no_rows(np.int8))
    api_cbid: np.ndarray = field(default_factory=lambda: _no_rows(np.int32))
    api_start_ns: np.ndarray = field(default_factory=lambda: _no_rows(np.int64))
    api_end_ns: np.ndarray = field(default_factory=lambda: _no_rows(np.int64))
    api_thread: np.ndarray = field(default_factory=lambda: _no_rows(np.int64))
    graph_id: np.ndarray = field(default_factory=lambda: _no_rows(np.int64))
    graph_node_id: np.ndarray = field(default_factory=lambda: _no_rows(np.int64))

    def _graph_column(self, values: np.ndarray) -> pa.Array:
        rows = len(self.correlation_id)
        return pa.array(values if len(values) == rows else np.full(rows, schema.NOT_IN_GRAPH, np.int64), pa.int64())

    def kernels_table(self) -> pa.Table:
        """Activity rows in the schema :data:`schema.KERNELS_WITH_GRAPHS` (``name`` and ``kind`` dictionary-encoded)."""
        # codes into the decoder's name table: no per-row string
        names = encoded.from_codes(self.name_index, [demangle(n) for n in self.names])
        kinds = encoded.from_codes(self.kind_code, KIND_NAMES)
        return pa.Table.from_arrays(
            [
                pa.array(self.correlation_id, pa.int64()),
                names,
                pa.array(self.start_ns, pa.int64()),
                pa.array(self.end_ns, pa.int64()),
                pa.array(self.device.astype(np.int32), pa.int32()),
                pa.array(self.stream, pa.int64()),
                kinds,
                self._graph_column(self.graph_id),
                self._graph_column(self.graph_node_id),
            ],
            schema=schema.KERNELS_WITH_GRAPHS,
        )

    def correlation_table(self) -> pa.Table:
        """Correlation rows in the schema :data:`schema.CORRELATION`."""
        return pa.Table.from_arrays(
            [pa.array(self.ext_correlation_id, pa.int64()), pa.array(self.ext_id, pa.int64())],
            schema=schema.CORRELATION,
        )

    def launches_table(self, callback_names: Mapping[tuple[int, int], str] | None = None) -> pa.Table:
        """API rows in the schema :data:`schema.LAUNCHES`, in CUPTI's clock; only the distinct (api, cbid)
        pairs are named, so no per-row Python work."""
        names = callback_names or {}
        keys = self.api_kind.astype(np.int64) << 32 | self.api_cbid.astype(np.int64)
        distinct, index = np.unique(keys, return_inverse=True)
        labels = []
        for key in distinct.tolist():
            api, cbid = key >> 32, key & 0xFFFFFFFF
            labels.append(names.get((api, cbid)) or f"{API_NAMES[api] if api < len(API_NAMES) else api} cbid {cbid}")
        api_names = encoded.from_codes(index, labels)
        apis = encoded.from_codes(self.api_kind, API_NAMES)
        return pa.Table.from_arrays(
            [
                pa.array(self.api_correlation_id, pa.int64()),
                apis,
                pa.array(self.api_cbid.astype(np.int32), pa.int32()),
                api_names,
                pa.array(self.api_start_ns, pa.int64()),
                pa.array(self.api_end_ns, pa.int64()),
                pa.array(self.api_thread, pa.int64()),
            ],
            schema=schema.LAUNCHES,
        )
