"""The native op tracer: the ops the Python ``OpMode`` would see, recorded by a C++ callback.

``native_shims/op_tracer.cpp`` registers a thread-local ``at::RecordFunction`` callback that keeps
only the ops a ``TorchDispatchMode`` is handed (the outermost op below any CompositeImplicitAutograd
decomposition), pushes each op id as a CUPTI external correlation id around the op, and appends
the op row in C++. No Python runs per op; the recorder keeps the tracer's (module, call, thread)
context current. Same rows, same op ids semantics, same OPS schema as :class:`dispatch.OpMode`.
"""

from __future__ import annotations

import warnings
from types import ModuleType, TracebackType

import numpy as np
import pyarrow as pa
import torch

from .. import schema
from .recorder import TraceRecorder

TRACERS = ("native", "python")


def load() -> ModuleType:
    """The compiled tracer; ImportError (with the fix) where it was not built for this torch."""
    fix = "build it with `python setup.py build_ext --inplace` where torch is installed (scripts/setup.sh does)"
    try:
        from .. import _op_tracer
    except ImportError as error:
        raise ImportError(f"the native op tracer is not built for this Python/torch ({error}); {fix}") from error
    built_for = getattr(_op_tracer, "torch_version", None)
    if built_for != torch.__version__:
        raise ImportError(f"the native op tracer was built for torch {built_for}, this is {torch.__version__}; {fix}")
    return _op_tracer


_fallback_warned = False


def available() -> bool:
    """True where the compiled tracer imports."""
    try:
        load()
    except ImportError:
        return False
    return True


def default_tracer() -> str:
    """``"native"`` where it is built for this torch, else ``"python"`` with a warning once per process."""
    global _fallback_warned
    try:
        load()
    except ImportError as error:
        if not _fallback_warned:
            _fallback_warned = True
            warnings.warn(f"{error}; recording aten ops with the slower Python dispatch mode", RuntimeWarning, 3)
        return "python"
    return "native"


class NativeOpTracer:
    """Context manager around one recorded pass; ``correlation_kind`` < 0 pushes nothing (CPU)."""

    def __init__(self, recorder: TraceRecorder, correlation_kind: int) -> None:
        self._native = load()
        self._recorder = recorder
        self._kind = correlation_kind
        self._ops: pa.Table | None = None

    def __enter__(self) -> NativeOpTracer:
        native = self._native
        if native.running():
            raise RuntimeError("the native op tracer is already recording another pass; profile one thing at a time")
        native.start(self._kind)
        stacks = self._recorder.stacks()
        native.set_context(stacks.modules[-1], stacks.calls[-1], stacks.index)
        self._recorder.context_changed = native.set_context
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._recorder.context_changed = None
        self._native.stop()
        self._ops = self._take()

    def ops_table(self) -> pa.Table:
        """The recorded ops as an Arrow table of schema :data:`schema.OPS`, after the pass."""
        if self._ops is None:
            raise RuntimeError("ops_table() is available once the traced pass has ended")
        return self._ops

    def _take(self) -> pa.Table:
        names, name_ids, *columns = self._native.take()
        ids = np.frombuffer(name_ids, dtype=np.int32)
        n = len(ids)
        ops = pa.DictionaryArray.from_arrays(pa.array(ids, pa.int32()), pa.array(names, pa.string()))
        return pa.Table.from_arrays(
            [pa.array(np.arange(n, dtype=np.int64)), ops.cast(pa.string())]
            + [pa.array(np.frombuffer(column, dtype=np.int64)) for column in columns],
            schema=schema.OPS,
        )
