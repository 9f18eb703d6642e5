"""The CUDA graph observer: which launch created each graph node, so that replays can be attributed.

The compiled decoder (``native_shims/cupti_callbacks.c``) records each node created during a capture
with the external id on top of the stack, and each clone with its original; where CUPTI's one
callback subscription is taken, :attr:`GraphNodeObserver.unavailable` says so (``docs/design.md``,
"torch.compile and CUDA graphs").
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa

from .. import schema
from ..collection.native import loaded_module

# CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: another tool (torch.profiler's Kineto, Nsight) subscribed
_MULTIPLE_SUBSCRIBERS = "error 39"


def loaded_decoder() -> Any | None:
    """The compiled decoder module with libcupti resolved (the observer runs in it), or None."""
    try:
        native = loaded_module()
    except (ImportError, OSError, RuntimeError):
        return None
    return native


def graph_rows_table(raw: tuple[Any, ...]) -> pa.Table:
    """``graph_observer_take()``'s little-endian byte columns (int8, int64 x 5, int32) as :data:`schema.GRAPH_NODES`."""
    event, graph, node, external, original_graph, original_node, node_type = raw[:7]
    arrays = [
        pa.array(np.frombuffer(event, np.int8), pa.int8()),
        *(pa.array(np.frombuffer(column, np.int64), pa.int64()) for column in (graph, node, external)),
        *(pa.array(np.frombuffer(column, np.int64), pa.int64()) for column in (original_graph, original_node)),
        pa.array(np.frombuffer(node_type, np.int32), pa.int32()),
    ]
    return pa.Table.from_arrays(arrays, schema=schema.GRAPH_NODES)


class GraphNodeObserver:
    """Records CUDA graph nodes created and cloned while it runs; single-use, idempotent ``stop``.

    ``external_kind`` is the CUPTI kind our ids are pushed with; ``native`` the loaded decoder, or None.
    """

    def __init__(self, external_kind: int, native: Any | None) -> None:
        self._kind = int(external_kind)
        self._native = native
        self._running = False
        self.unavailable: str | None = None  # why captures are not observed, in words
        self.lost = 0

    def start(self) -> bool:
        """Subscribe; False (with :attr:`unavailable` saying why) where CUPTI's callbacks cannot be had."""
        if self._native is None:
            self.unavailable = (
                "the compiled CUPTI decoder is not built, and it holds the graph observer "
                "(python setup.py build_ext --inplace builds it)"
            )
            return False
        try:
            self._native.graph_observer_start(self._kind)
        except (RuntimeError, AttributeError) as error:
            detail = str(error)
            if _MULTIPLE_SUBSCRIBERS in detail:
                detail += (
                    ": another CUPTI client (torch.profiler's Kineto once it has run in this process, "
                    "Nsight) holds the one callback subscription CUPTI allows"
                )
            self.unavailable = f"CUDA graph captures cannot be observed ({detail})"
            return False
        self._running = True
        return True

    def take(self) -> pa.Table:
        """The graph-node rows since start or the last take (schema :data:`schema.GRAPH_NODES`)."""
        raw = self.take_raw()
        return schema.empty(schema.GRAPH_NODES) if raw is None else graph_rows_table(raw)

    def take_raw(self) -> tuple[Any, ...] | None:
        """:meth:`take`'s rows as the decoder hands them (``graph_rows_table`` builds the table), or None
        without a decoder: an observed capture keeps these and builds its table when a profile() needs it."""
        if self._native is None or not hasattr(self._native, "graph_observer_take"):
            return None
        raw = self._native.graph_observer_take()
        counters = raw[7]
        self.lost += int(counters.get("lost", 0)) + int(counters.get("id_errors", 0))
        return tuple(raw)

    def stop(self) -> None:
        """Unsubscribe (safe to call twice, and after a failed start); a CUPTI failure is a warning, not an error."""
        if self._running:
            self._running = False
            try:
                self._native.graph_observer_stop()
            except RuntimeError as error:  # the run's records are complete; only the subscription lingers
                warnings.warn(f"the CUDA graph observer could not unsubscribe from CUPTI ({error})", RuntimeWarning, 2)


def graph_row_count(raw: tuple[Any, ...] | None) -> int:
    """How many rows ``GraphNodeObserver.take_raw()``'s columns hold (its first is one byte a row)."""
    return 0 if raw is None else len(raw[0])
