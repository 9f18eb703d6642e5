"""The pure-Python tracing backend, the fallback where the native one is not built, with the same rows
and schemas; every test runs on both (``docs/design.md``, "The native tracing backend")."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType

from torch import nn

from .. import schema, torch_compat
from ..schema import FunctionData
from .buffers import TraceBuffers
from .contract import CorrelationTarget, ThreadInfo, TraceTables
from .dispatch import OpMode
from .functional import FunctionalMode
from .mode_stack import exit_dispatch_mode, exit_function_mode
from .samples import SampleCollector


class _Silent:
    """Takes op brackets and tells no one (a source that correlates nothing)."""

    def op_started(self, op_id: int, op: str) -> None:
        """Nothing to do."""

    def op_finished(self, op_id: int) -> None:
        """Nothing to do."""


class PythonTracer:
    """Context manager around one recorded pass on the calling thread; single-use."""

    name = "python"

    def __init__(
        self,
        modules: Iterable[tuple[nn.Module, int]],
        function_names: frozenset[str] | None,
        target: CorrelationTarget,
        all_functions: bool = False,
        running_before: Mapping[int, threading.Thread | None] | None = None,
    ) -> None:
        """One pass over ``(module, module_id)`` pairs; ``running_before`` as for ``TraceBuffers.begin_pass``."""
        self._running_before = running_before
        self.buffers = TraceBuffers(torch_compat.next_sequence_nr)
        self.samples = SampleCollector(function_names)
        self._ids = {id(module): module_id for module, module_id in modules}
        correlates = target.correlation_kind != schema.NO_CORRELATION  # the CPU source correlates nothing
        if correlates:  # launches outside any op are tagged with the scope they ran in
            self.buffers.scope_entered = target.scope_entered
            self.buffers.scope_exited = target.scope_exited
        self._modes = (
            FunctionalMode(self.buffers, self.samples, all_functions),
            OpMode(self.buffers, target if correlates else _Silent()),
        )
        self.function_mode = self._modes[0]
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> PythonTracer:
        if self._stack is not None:
            raise RuntimeError("a PythonTracer records one pass; create a new one")
        # the profiling thread is thread 0; threads running before profile() began are not traced
        self.buffers.begin_pass(self._running_before)
        with contextlib.ExitStack() as stack:
            stack.callback(torch_compat.higher_order_operators_handed_to(OpMode))
            # each mode leaves its stack even where the profiled function left a mode of its own above it
            for mode, exit_mode in zip(self._modes, (exit_function_mode, exit_dispatch_mode)):
                mode.__enter__()
                stack.push(functools.partial(exit_mode, mode))
            self._stack = stack.pop_all()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stack is not None:
            self._stack.close()

    def module_entered(self, module: nn.Module) -> None:
        """A forward of ``module`` begins on this thread."""
        module_id = self._ids.get(id(module))
        if module_id is not None:
            self.buffers.enter_module(module_id)

    def module_exited(self, module: nn.Module) -> None:
        """A forward of ``module`` ended on this thread."""
        module_id = self._ids.get(id(module))
        if module_id is not None:
            self.buffers.exit_module(module_id)

    def modules_added(self, modules: Iterable[tuple[nn.Module, int]]) -> None:
        """Modules discovered during the pass join the hierarchy."""
        self._ids.update((id(module), module_id) for module, module_id in modules)

    def later_tables(self) -> Callable[[], TraceTables]:
        """The tables, built now (the buffers are small next to what converting them later would keep)."""
        tables = self.tables()
        return lambda: tables

    def tables(self) -> TraceTables:
        """The pass as Arrow tables."""
        buffers = self.buffers
        return TraceTables(
            ops=buffers.ops_table(),
            calls=buffers.calls_table(),
            module_calls=buffers.module_calls_table(),
            contexts=buffers.contexts_table(),
            threads=tuple(
                ThreadInfo(t.index, t.name, t.traced, t.skipped_forwards, t.native_id) for t in buffers.threads
            ),
            scopes_pushed=len(buffers.ctx_module),
            ops_pushed=self._modes[1].pushed,
            **buffers.link_tables(),
        )

    def function_data(self) -> FunctionData:
        """The collected samples, in the reference's ``function_data`` shape."""
        return self.samples.function_data()
