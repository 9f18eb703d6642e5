"""The CUDA graph observer: which launch created each graph node, so that replays can be attributed.

A CUDA graph replay dispatches no aten op, and CUPTI tags its kernels with the correlation id of
the ``cudaGraphLaunch`` that replayed them (``docs/design.md``, "torch.compile and CUDA graphs").
What launched each kernel is known only while the graph is captured: every launch recorded into
the graph creates a graph node, on the capturing thread, inside the launch call, where our op /
scope id is on top of CUPTI's external-correlation stack. The compiled decoder
(``native_shims/cupti_decoder.c``) subscribes to CUPTI's two graph-node resource callbacks and
records, without Python:

* a node *created* (during a capture): its graph and node ids and that external id;
* a node *cloned* (when a graph is instantiated): the clone's ids, which replayed kernels carry,
  and the ids of the node it was cloned from.

``provenance.captured_nodes`` turns these rows and the trace of the pass that captured the graph
into the module, functional call and op of each replayed node. CUPTI serves one callback
subscriber per process; where another tool holds it (or the compiled decoder is not built), the
observer says why in :attr:`GraphNodeObserver.unavailable` and replays keep today's attribution.
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
    """The compiled decoder module with libcupti resolved (the observer runs in it), or None.

    Returns
    -------
    module or None
        ``aitune_dispatch.collection._cupti_native`` after ``load()``; None where it is not built or libcupti
        cannot be loaded (the observer then reports itself unavailable).
    """
    try:
        native = loaded_module()
    except (ImportError, OSError, RuntimeError):
        return None
    return native


def graph_rows_table(raw: tuple[Any, ...]) -> pa.Table:
    """The raw columns of ``_cupti_native.graph_observer_take()`` as a table of schema :data:`schema.GRAPH_NODES`.

    Parameters
    ----------
    raw:
        ``(event, graph_id, node_id, external_id, original_graph_id, original_node_id, node_type, counters)``,
        each column little-endian bytes (int8, int64 x 5, int32).

    Returns
    -------
    pyarrow.Table
        One row per graph-node event, in the order CUPTI reported them.
    """
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

    Parameters
    ----------
    external_kind:
        The CUPTI external-correlation kind our op and scope ids are pushed with.
    native:
        The compiled decoder module (``aitune_dispatch.collection._cupti_native``, already ``load()``-ed), or
        None where it is not built.
    """

    def __init__(self, external_kind: int, native: Any | None) -> None:
        self._kind = int(external_kind)
        self._native = native
        self._running = False
        self.unavailable: str | None = None  # why captures are not observed, in words; None when they are
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
        if self._native is None or not hasattr(self._native, "graph_observer_take"):
            return schema.empty(schema.GRAPH_NODES)
        raw = self._native.graph_observer_take()
        counters = raw[7]
        self.lost += int(counters.get("lost", 0)) + int(counters.get("id_errors", 0))
        return graph_rows_table(raw)

    def stop(self) -> None:
        """Unsubscribe (safe to call twice, and after a failed start); a CUPTI failure is a warning, not an error."""
        if self._running:
            self._running = False
            try:
                self._native.graph_observer_stop()
            except RuntimeError as error:  # the run's records are complete; only the subscription lingers
                warnings.warn(f"the CUDA graph observer could not unsubscribe from CUPTI ({error})", RuntimeWarning, 2)
