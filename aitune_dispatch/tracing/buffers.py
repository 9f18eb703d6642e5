"""Append-only ``array('q')`` columns of ops, functional calls and module calls, the one state the
pure-Python hooks and modes share, with per-thread stacks, turned into Arrow tables once at the end
(``docs/design.md``, "Threads")."""

from __future__ import annotations

import sys
import threading
import time
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .. import encoded, schema

_clock_ns = time.perf_counter_ns


def other_threads_running() -> dict[int, threading.Thread | None]:
    """Every thread running now except the caller, by ident (None: a thread without a Thread object)."""
    running: dict[int, threading.Thread | None] = dict.fromkeys(sys._current_frames())
    running.update((thread.ident, thread) for thread in threading.enumerate() if thread.ident is not None)
    running.pop(threading.get_ident(), None)
    return running


def still_running(before: Mapping[int, threading.Thread | None]) -> dict[int, threading.Thread | None]:
    """The threads of ``before`` that run now as the same thread (not a reused ident)."""
    return {
        ident: thread
        for ident, thread in other_threads_running().items()
        if ident in before and (before[ident] is None or before[ident] is thread)
    }


@dataclass
class ThreadStacks:
    """The module and functional-call stacks of one thread; the bottom entries are sentinels."""

    index: int
    name: str = ""
    traced: bool = True
    skipped_forwards: int = 0  # forwards of profiled modules on an untraced thread
    native_id: int = 0
    modules: list[int] = field(default_factory=lambda: [schema.NO_MODULE])
    calls: list[int] = field(default_factory=lambda: [schema.NO_CALL])
    module_rows: list[int] = field(default_factory=lambda: [-1])  # parallel to ``modules``
    # functions whose body is running with torch-function dispatch re-armed (see functional.py)
    reentered: list[object] = field(default_factory=list)
    next_seq: int = 0  # the autograd sequence number after the last node claimed (tracing/links.py)
    scopes: list[int] = field(default_factory=list)  # per open profiling scope: its row, or -1 (not kept)


class _Interner:
    """Maps repeated strings to small ids so that the hot path appends integers only."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self.names)
            self.names.append(name)
        return found

    def column(self, ids: array) -> pa.Array:
        """The ids as a dictionary column of the interned names (schema.STRING: no per-row string)."""
        return encoded.from_codes(np.frombuffer(ids, dtype=np.int64).astype(np.int32) if len(ids) else [], self.names)


def _int64(values: array) -> pa.Array:
    return pa.array(np.frombuffer(values, dtype=np.int64) if len(values) else [], pa.int64())


class TraceBuffers:
    """Columnar record of one profiled pass; single writer per thread, read after the pass."""

    def __init__(self, sequence_nr: Callable[[], int] = lambda: 0) -> None:
        """``sequence_nr``: the calling thread's next autograd sequence number (torch's
        ``torch._C._autograd._get_sequence_nr``), read as each op ends."""
        self._next_seq_now = sequence_nr
        self._local = threading.local()
        self._thread_lock = threading.Lock()
        self.threads: list[ThreadStacks] = []  # by index, in order of first use
        self._running_before: dict[int, threading.Thread | None] = {}
        self.op_names = _Interner()
        self.function_names = _Interner()
        self.op_name = array("q")
        self.op_module = array("q")
        self.op_call = array("q")
        self.op_thread = array("q")
        self.op_start = array("q")
        self.op_end = array("q")
        # bound once: add_op runs for every aten op
        self._op_appends = tuple(
            column.append
            for column in (self.op_name, self.op_module, self.op_call, self.op_thread, self.op_end, self.op_start)
        )
        self.call_name = array("q")
        self.call_parent = array("q")
        self.call_module = array("q")
        self.call_start = array("q")
        self.call_end = array("q")
        self.call_thread = array("q")
        self.call_sample = array("q")
        self.mcall_module = array("q")
        self.mcall_start = array("q")
        self.mcall_end = array("q")
        self.mcall_thread = array("q")
        self.ctx_module = array("q")
        self.ctx_call = array("q")
        # what tracing/links.py links backward and optimizer ops with
        self.node_op = array("q")
        self.node_thread = array("q")
        self.node_first = array("q")
        self.node_end = array("q")
        self.backward_op = array("q")
        self.backward_seq = array("q")
        self.scope_name: list[str] = []
        self.scope_thread = array("q")
        self.scope_start = array("q")
        self.scope_end = array("q")
        self.scope_entered: Callable[[int], object] | None = None
        self.scope_exited: Callable[[], object] | None = None

    def begin_pass(self, running_before: Mapping[int, threading.Thread | None] | None = None) -> None:
        """Call on the profiling thread as the pass begins; ``running_before`` (None: those running now)
        are not the profiled function's threads."""
        self._running_before = dict(other_threads_running() if running_before is None else running_before)
        self.stacks()

    def _was_running_before(self, thread: threading.Thread) -> bool:
        if thread.ident not in self._running_before:
            return False
        before = self._running_before[thread.ident]
        # the same Thread object (an ident can be reused); None: a thread that had no Thread object
        return before is thread or before is None

    def stacks(self) -> ThreadStacks:
        """The calling thread's stacks, created on first use."""
        found = getattr(self._local, "stacks", None)
        if found is None:
            thread = threading.current_thread()
            with self._thread_lock:
                found = ThreadStacks(
                    len(self.threads),
                    thread.name,
                    not self._was_running_before(thread),
                    native_id=threading.get_native_id(),
                    next_seq=self._next_seq_now(),
                )
                self.threads.append(found)
            self._local.stacks = found
        return found

    # -- ops ------------------------------------------------------------------------------------
    def add_op(self, name_id: int) -> int:
        """Append one dispatched aten op of the calling thread; returns its op id (the correlation key)."""
        try:
            stacks = self._local.stacks
        except AttributeError:
            stacks = self.stacks()
        op_id = len(self.op_name)
        self._op_appends[0](name_id)
        self._op_appends[1](stacks.modules[-1])
        self._op_appends[2](stacks.calls[-1])
        self._op_appends[3](stacks.index)
        self._op_appends[4](0)
        self._op_appends[5](_clock_ns())
        return op_id

    def end_op(self, op_id: int) -> None:
        """Stamp the end of an op opened by :meth:`add_op`, and note the autograd nodes created since the
        previous op of its thread ended: by this op, or just before it (a custom ``autograd.Function``'s)."""
        self.op_end[op_id] = _clock_ns()
        next_seq = self._next_seq_now()
        stacks = self._local.stacks
        if next_seq > stacks.next_seq:
            self.node_op.append(op_id)
            self.node_thread.append(stacks.index)
            self.node_first.append(stacks.next_seq)
            self.node_end.append(next_seq)
            stacks.next_seq = next_seq

    def add_backward_op(self, op_id: int, node_seq: int) -> None:
        """Note that op ``op_id`` runs while autograd's engine evaluates the node numbered ``node_seq``."""
        self.backward_op.append(op_id)
        self.backward_seq.append(node_seq)

    def open_scope(self, name: str) -> None:
        """A profiling scope began on this thread (``torch.autograd.profiler.record_function``); only
        ``torch.optim``'s are kept (schema ``USER_SCOPES``)."""
        stacks = self.stacks()
        row = -1
        if name.startswith(schema.OPTIMIZER_SCOPE_PREFIX):
            row = len(self.scope_name)
            self.scope_name.append(name)
            self.scope_thread.append(stacks.index)
            self.scope_start.append(_clock_ns())
            self.scope_end.append(0)
        stacks.scopes.append(row)

    def close_scope(self) -> None:
        """The innermost scope of this thread ended (scopes nest: ``record_function`` is a context manager)."""
        scopes = self.stacks().scopes
        if scopes:  # else: opened before this pass
            row = scopes.pop()
            if row >= 0:
                self.scope_end[row] = _clock_ns()

    # -- functional calls -------------------------------------------------------------------------
    def begin_call(self, name_id: int, stacks: ThreadStacks, sample: int = schema.NO_SAMPLE) -> int:
        """Open a functional call on this thread; ``sample`` indexes ``function_data[name]``; returns its id."""
        call_id = len(self.call_name)
        self.call_name.append(name_id)
        self.call_parent.append(stacks.calls[-1])
        self.call_module.append(stacks.modules[-1])
        self.call_start.append(_clock_ns())
        self.call_end.append(0)
        self.call_thread.append(stacks.index)
        self.call_sample.append(sample)
        stacks.calls.append(call_id)
        self._enter_scope(stacks)
        return call_id

    def end_call(self, call_id: int, stacks: ThreadStacks) -> None:
        """Close a functional call opened by :meth:`begin_call`."""
        self.call_end[call_id] = _clock_ns()
        if stacks.calls[-1] == call_id:
            stacks.calls.pop()
            self._exit_scopes(1)
        elif call_id in stacks.calls:
            pos = stacks.calls.index(call_id)
            self._exit_scopes(len(stacks.calls) - pos)
            del stacks.calls[pos:]

    # -- scopes: the (module, call) context that launches outside any op are attributed to ----------
    def _enter_scope(self, stacks: ThreadStacks) -> None:
        if self.scope_entered is not None:
            self.ctx_module.append(stacks.modules[-1])
            self.ctx_call.append(stacks.calls[-1])
            self.scope_entered(len(self.ctx_module) - 1)

    def _exit_scopes(self, count: int) -> None:
        if self.scope_exited is not None:
            for _ in range(count):
                self.scope_exited()

    # -- module calls -----------------------------------------------------------------------------
    def enter_module(self, module_id: int) -> None:
        """Push a module of the profiled hierarchy on this thread's stack (on a traced thread)."""
        stacks = self.stacks()
        if not stacks.traced:
            stacks.skipped_forwards += 1
            return
        stacks.modules.append(module_id)
        stacks.module_rows.append(len(self.mcall_module))
        self.mcall_module.append(module_id)
        self.mcall_start.append(_clock_ns())
        self.mcall_end.append(0)
        self.mcall_thread.append(stacks.index)
        self._enter_scope(stacks)

    def exit_module(self, module_id: int) -> None:
        """Pop ``module_id`` (and anything an exception left above it) from this thread's stack."""
        stacks = self.stacks()
        mods = stacks.modules
        if not stacks.traced:
            return
        for pos in range(len(mods) - 1, 0, -1):
            if mods[pos] == module_id:
                now = _clock_ns()
                for row in stacks.module_rows[pos:]:
                    self.mcall_end[row] = now
                self._exit_scopes(len(mods) - pos)
                del mods[pos:]
                del stacks.module_rows[pos:]
                return

    # -- output ------------------------------------------------------------------------------------
    def ops_table(self) -> pa.Table:
        """The ops as an Arrow table of schema :data:`schema.OPS`."""
        n = len(self.op_name)
        return pa.Table.from_arrays(
            [
                pa.array(np.arange(n, dtype=np.int64)),
                self.op_names.column(self.op_name),
                _int64(self.op_module),
                _int64(self.op_call),
                _int64(self.op_thread),
                _int64(self.op_start),
                _int64(self.op_end),
            ],
            schema=schema.OPS,
        )

    def calls_table(self) -> pa.Table:
        """The functional calls as an Arrow table of schema :data:`schema.CALLS`."""
        n = len(self.call_name)
        return pa.Table.from_arrays(
            [
                pa.array(np.arange(n, dtype=np.int64)),
                self.function_names.column(self.call_name),
                _int64(self.call_parent),
                _int64(self.call_module),
                _int64(self.call_start),
                _int64(self.call_end),
                _int64(self.call_thread),
                _int64(self.call_sample),
            ],
            schema=schema.CALLS,
        )

    def contexts_table(self) -> pa.Table:
        """Scope contexts pushed for launches outside ops, as a table of schema :data:`schema.CONTEXTS`."""
        return pa.Table.from_arrays(
            [pa.array(np.arange(len(self.ctx_module), dtype=np.int64)), _int64(self.ctx_module), _int64(self.ctx_call)],
            schema=schema.CONTEXTS,
        )

    def link_tables(self) -> dict[str, pa.Table]:
        """``autograd_nodes``, ``backward_ops`` and ``user_scopes`` (schemas of those names), by keyword of
        :class:`~aitune_dispatch.tracing.contract.TraceTables`; the forward thread of a backward op is not
        known here (-1)."""
        backward = _int64(self.backward_op)
        return {
            "autograd_nodes": pa.Table.from_arrays(
                [_int64(column) for column in (self.node_op, self.node_thread, self.node_first, self.node_end)],
                schema=schema.AUTOGRAD_NODES,
            ),
            "backward_ops": pa.Table.from_arrays(
                [backward, _int64(self.backward_seq), pa.array(np.full(len(backward), -1, np.int64))],
                schema=schema.BACKWARD_OPS,
            ),
            "user_scopes": pa.Table.from_arrays(
                [pa.array(self.scope_name, pa.string())]
                + [_int64(column) for column in (self.scope_thread, self.scope_start, self.scope_end)],
                schema=schema.USER_SCOPES,
            ),
        }

    def module_calls_table(self) -> pa.Table:
        """Every forward of a profiled module, as a table of schema :data:`schema.MODULE_CALLS`."""
        return pa.Table.from_arrays(
            [
                _int64(self.mcall_module),
                _int64(self.mcall_start),
                _int64(self.mcall_end),
                _int64(self.mcall_thread),
            ],
            schema=schema.MODULE_CALLS,
        )
