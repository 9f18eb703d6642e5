"""One traced pass: installs hooks and both modes on entry and removes all of them on exit."""

from __future__ import annotations

import contextlib
from types import TracebackType

import pyarrow as pa
from torch import nn

from .diagnostics import trace_warnings
from .dispatch import OpMode, OpObserver
from .functional import FunctionalMode
from .gates import ModeBlindGates
from .modules import ModuleTracker
from .native_ops import NativeOpTracer
from .recorder import TraceRecorder
from .samples import FunctionData, SampleCollector


class TraceSession:
    """Context manager around the recorded pass; not reentrant, one instance per pass."""

    def __init__(
        self,
        root: nn.Module,
        function_names: frozenset[str] | None,
        observer: OpObserver,
        all_functions: bool = False,
        aliases: tuple[nn.Module, ...] = (),
        op_tracer: str = "python",
    ) -> None:
        self.recorder = TraceRecorder()
        self.modules = ModuleTracker(root, aliases)
        self.samples = SampleCollector(function_names)
        self._observer = observer
        # sources that can tag launches made outside any op (CUDA) follow the scope stack too
        self.recorder.scope_entered = getattr(observer, "scope_entered", None)
        self.recorder.scope_exited = getattr(observer, "scope_exited", None)
        self._all_functions = all_functions
        # "native": the C++ RecordFunction tracer records ops (and pushes their ids) instead of OpMode
        self._native = NativeOpTracer(self.recorder, observer.correlation_kind) if op_tracer == "native" else None
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> TraceSession:
        if self._stack is not None:
            raise RuntimeError("a TraceSession is single-use and not reentrant")
        stack = contextlib.ExitStack()
        self.recorder.begin_pass()  # threads already running are not the profiled function's
        try:
            self.modules.install(self.recorder)
            stack.callback(self.modules.remove)
            mode = stack.enter_context(FunctionalMode(self.recorder, self.samples, self._all_functions))
            # fast paths gated on has_torch_function take the path they take without our mode
            stack.enter_context(ModeBlindGates(mode))
            if self._native is not None:
                stack.enter_context(self._native)
            else:
                stack.enter_context(OpMode(self.recorder, self._observer))
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._stack is not None
        self._stack.close()

    def tables(self) -> dict[str, pa.Table]:
        """The trace as Arrow tables: ``ops``, ``calls``, ``modules``, ``module_calls``, ``contexts``."""
        return {
            "ops": self._native.ops_table() if self._native is not None else self.recorder.ops_table(),
            "calls": self.recorder.calls_table(),
            "modules": self.modules.table(),
            "module_calls": self.recorder.module_calls_table(),
            "contexts": self.recorder.contexts_table(),
        }

    def warnings(self) -> list[str]:
        """What ran but could not be recorded (other threads, TorchScript, a module that never ran)."""
        return trace_warnings(self.recorder, self.modules)

    def function_data(self) -> FunctionData:
        """The collected samples, in the reference's ``function_data`` shape."""
        return self.samples.function_data()
