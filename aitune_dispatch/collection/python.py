"""The pure ``cupti-python`` decoder backend, the fallback where the compiled decoder is not built: one
Python object per record (``docs/design.md``, "Correlation: what CUPTI needs")."""

from __future__ import annotations

from typing import Any

import numpy as np

from .decoded import (
    API_DRIVER,
    API_RUNTIME,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    DecodedRecords,
    memcpy_name,
    memset_name,
)

BUFFER_BYTES = 8 * 1024 * 1024


class PythonRecordSink:
    """Collects cupti-python activity objects and decodes them into columns."""

    name = "python"

    def __init__(self, cupti: Any, external_kind: int) -> None:
        self._cupti = cupti
        self._external_kind = external_kind
        kinds = cupti.ActivityKind
        self._kernel = int(kinds.CONCURRENT_KERNEL)
        self._memcpy = int(kinds.MEMCPY)
        self._memset = int(kinds.MEMSET)
        self._correlation = int(kinds.EXTERNAL_CORRELATION)
        self._api = {int(kinds.RUNTIME): API_RUNTIME, int(kinds.DRIVER): API_DRIVER}
        self._kept = frozenset((self._kernel, self._memcpy, self._memset, self._correlation, *self._api))
        self._objects: list[Any] = []
        self._seen = 0

    def register(self) -> None:
        """Register the cupti-python callbacks and forget older records."""
        self._objects = []
        self._seen = 0
        self._cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)

    @staticmethod
    def _buffer_requested() -> tuple[int, int]:
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities: list[Any]) -> None:
        kept = self._kept
        self._seen += len(activities)
        self._objects.extend(a for a in activities if a.kind in kept)

    def take(self) -> DecodedRecords:
        """Decode the kept objects into columns."""
        rows: list[tuple[int, int, int, int, int, int, str]] = []
        graphs: list[tuple[int, int]] = []
        ext_cid: list[int] = []
        ext_id: list[int] = []
        calls: list[tuple[int, int, int, int, int, int]] = []
        api = self._api
        for a in self._objects:
            kind = a.kind
            if kind in api:
                calls.append((a.correlation_id, api[kind], a.cbid, a.start, a.end, a.thread_id))
            elif kind == self._correlation:
                if a.external_kind == self._external_kind:
                    ext_cid.append(a.correlation_id)
                    ext_id.append(a.external_id)
            elif kind == self._kernel:
                rows.append((a.correlation_id, a.start, a.end, a.device_id, a.stream_id, KIND_KERNEL, a.name))
                graphs.append(_graph_ids(a))
            elif kind == self._memcpy:
                name = memcpy_name(a.copy_kind, a.src_kind, a.dst_kind)
                rows.append((a.correlation_id, a.start, a.end, a.device_id, a.stream_id, KIND_MEMCPY, name))
                graphs.append(_graph_ids(a))
            elif kind == self._memset:
                name = memset_name(a.memory_kind)
                rows.append((a.correlation_id, a.start, a.end, a.device_id, a.stream_id, KIND_MEMSET, name))
                graphs.append(_graph_ids(a))
        self._objects = []
        names: dict[str, int] = {}
        name_index = np.fromiter((names.setdefault(r[6], len(names)) for r in rows), np.int32, len(rows))
        columns = np.array([r[:6] for r in rows], dtype=np.int64).reshape(len(rows), 6)
        api_columns = np.array(calls, dtype=np.int64).reshape(len(calls), 6)
        graph_columns = np.array(graphs, dtype=np.uint64).reshape(len(graphs), 2).view(np.int64)
        return DecodedRecords(
            correlation_id=columns[:, 0].copy(),
            start_ns=columns[:, 1].copy(),
            end_ns=columns[:, 2].copy(),
            device=columns[:, 3].copy(),
            stream=columns[:, 4].copy(),
            kind_code=columns[:, 5].astype(np.int8),
            name_index=name_index,
            names=list(names),
            ext_correlation_id=np.array(ext_cid, dtype=np.int64),
            ext_id=np.array(ext_id, dtype=np.uint64).view(np.int64),  # CUPTI ids are uint64
            records=self._seen,
            api_correlation_id=api_columns[:, 0].copy(),
            api_kind=api_columns[:, 1].astype(np.int8),
            api_cbid=api_columns[:, 2].astype(np.int32),
            api_start_ns=api_columns[:, 3].copy(),
            api_end_ns=api_columns[:, 4].copy(),
            api_thread=api_columns[:, 5].copy(),
            graph_id=graph_columns[:, 0].copy(),
            graph_node_id=graph_columns[:, 1].copy(),
        )


def _graph_ids(activity: Any) -> tuple[int, int]:
    """(graph_id, graph_node_id) of a kernel / copy / set object; 0 where this cupti-python lacks them."""
    return int(getattr(activity, "graph_id", 0) or 0), int(getattr(activity, "graph_node_id", 0) or 0)
