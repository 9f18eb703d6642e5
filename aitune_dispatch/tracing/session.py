"""One traced pass: installs the module hooks, a tracer and the mode-blind gates, and removes them all."""

from __future__ import annotations

import contextlib
from types import TracebackType

import pyarrow as pa

from ..schema import FunctionData
from .contract import Tracer, TraceTables
from .gates import ModeBlindGates
from .links import linked
from .modules import ModuleTracker


class TraceSession:
    """Context manager around the recorded pass, one instance per pass; removes all it installed on exit."""

    def __init__(self, modules: ModuleTracker, tracer: Tracer) -> None:
        self.modules = modules
        self.tracer = tracer
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> TraceSession:
        if self._stack is not None:
            raise RuntimeError("a TraceSession is single-use and not reentrant")
        with contextlib.ExitStack() as stack:
            tracer = self.tracer
            self.modules.install(tracer.module_entered, tracer.module_exited, tracer.modules_added)
            stack.callback(self.modules.remove)
            stack.enter_context(self.tracer)
            # fast paths gated on has_torch_function take the path they take without our mode
            stack.enter_context(ModeBlindGates(self.tracer.function_mode))
            self._stack = stack.pop_all()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._stack is not None
        self._stack.close()

    def tables(self) -> TraceTables:
        """The trace as Arrow tables, backward and optimizer ops linked (``tracing/links.py``)."""
        return linked(self.tracer.tables())

    def modules_table(self) -> pa.Table:
        """The profiled hierarchy (schema ``MODULES``)."""
        return self.modules.table()

    def function_data(self) -> FunctionData:
        """The collected samples, in the reference's ``function_data`` shape."""
        return self.tracer.function_data()
