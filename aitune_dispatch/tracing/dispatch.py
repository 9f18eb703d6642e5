"""The pure-Python ``TorchDispatchMode`` that gives every aten op an op id, the key joining activity
to tracing, and brackets it for the activity source (``docs/design.md``, "Correlation: what CUPTI needs")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from torch.utils._python_dispatch import TorchDispatchMode

from ..torch_compat import skip_dynamo_frames
from .buffers import TraceBuffers


class OpObserver(Protocol):
    """What an activity source needs to know about each op, on the thread that runs it."""

    def op_started(self, op_id: int, op: str) -> None:
        """Called right before the op runs."""

    def op_finished(self, op_id: int) -> None:
        """Called right after the op returns or raises."""


def op_name(func: Any) -> str:
    """``aten::addmm`` for ``aten.addmm.default``, as torch.profiler names it; ``higher_order::flex_attention``
    for a higher-order operator, which has no schema."""
    schema = getattr(func, "_schema", None)
    if schema is not None:
        return schema.name
    namespace, name = getattr(func, "namespace", None), getattr(func, "name", None)
    return f"{namespace}::{name()}" if isinstance(namespace, str) and callable(name) else str(func)


class OpMode(TorchDispatchMode):
    """Records one op row per aten op and brackets it for the activity source; one instance per pass.

    A higher-order operator (eager ``flex_attention``) is one op, the ops inside it unseen (the native
    tracer records those); torch refuses to run one under a mode that does not declare support.
    """

    supports_higher_order_operators = True

    def __init__(self, buffers: TraceBuffers, observer: OpObserver) -> None:
        super().__init__()
        self._buffers = buffers
        self._started = observer.op_started
        self._finished = observer.op_finished
        self._add_op = buffers.add_op
        self._end_op = buffers.end_op
        # func -> (name id, name, whether its id is pushed: view ops launch nothing, so never)
        self._names: dict[Callable[..., Any], tuple[int, str, bool]] = {}
        self.pushed = 0  # op ids handed to the observer

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # read by TorchDispatchMode.__init_subclass__, after the class body below has run
        return not cls.__dict__.get("_frames_skipped", False)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let torch.compile'd regions run compiled; their kernels still carry correlation ids."""
        return True

    def __torch_dispatch__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        named = self._names.get(func)
        if named is None:
            name = op_name(func)
            named = self._names[func] = (self._buffers.op_names.id(name), name, not getattr(func, "is_view", False))
        op_id = self._add_op(named[0])
        if not named[2]:
            try:
                return func(*args, **(kwargs or {}))
            finally:
                self._end_op(op_id)
        self.pushed += 1
        self._started(op_id, named[1])
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self._finished(op_id)
            self._end_op(op_id)

    _frames_skipped = skip_dynamo_frames(__torch_dispatch__.__code__)
