"""The pure-Python ``TorchDispatchMode`` that gives every aten op an op id, the key joining activity
to tracing, and brackets it for the activity source (``docs/design.md``, "Correlation: what CUPTI needs")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..torch_compat import current_autograd_node, skip_dynamo_frames
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


_PLAIN, _SCOPE_ENTER, _SCOPE_EXIT = 0, 1, 2  # what an op is to OpMode: an op, or a profiling scope's bracket


def _scope_brackets() -> dict[Any, int]:
    """The ops ``torch.autograd.profiler.record_function`` opens and closes a scope with (what torch.optim's
    "Optimizer.step#AdamW.step" is); empty where a torch lacks them."""
    try:
        return {
            torch.ops.profiler._record_function_enter_new.default: _SCOPE_ENTER,
            torch.ops.profiler._record_function_exit._RecordFunction: _SCOPE_EXIT,
        }
    except (AttributeError, RuntimeError):  # pragma: no cover - every supported torch has both
        return {}


class OpMode(TorchDispatchMode):
    """Records one op row per aten op and brackets it for the activity source; one instance per pass.

    A higher-order operator (eager ``flex_attention``) is one op, the ops inside it unseen (the native
    tracer records those); torch refuses to run one under a mode that does not declare support. An op
    run in backward is noted with the node autograd evaluates, and torch.optim's profiling scopes with
    their bounds, for ``tracing/links.py``.
    """

    supports_higher_order_operators = True

    def __init__(self, buffers: TraceBuffers, observer: OpObserver) -> None:
        super().__init__()
        self._buffers = buffers
        self._started = observer.op_started
        self._finished = observer.op_finished
        self._add_op = buffers.add_op
        self._end_op = buffers.end_op
        self._add_backward_op = buffers.add_backward_op
        self._brackets = _scope_brackets()
        # func -> (name id, name, whether its id is pushed: view ops launch nothing, so never, what it is)
        self._names: dict[Callable[..., Any], tuple[int, str, bool, int]] = {}
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
            named = self._names[func] = (
                self._buffers.op_names.id(name),
                name,
                not getattr(func, "is_view", False),
                self._brackets.get(func, _PLAIN),
            )
        if named[3] != _PLAIN:
            return self._bracket(func, named[3], args, kwargs or {})
        op_id = self._add_op(named[0])
        node = current_autograd_node()
        if node is not None:
            self._add_backward_op(op_id, node)
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

    def _bracket(self, func: Callable[..., Any], kind: int, args: tuple[Any, ...], kwargs: Any) -> Any:
        """A profiling scope's opening or closing op: no op row (torch does not observe these ops, so the
        native tracer sees none), the scope noted where its USER_SCOPE callback notes it."""
        result = func(*args, **kwargs)
        if kind == _SCOPE_ENTER:
            self._buffers.open_scope(str(args[0]) if args else "")
        else:
            self._buffers.close_scope()
        return result

    _frames_skipped = skip_dynamo_frames(__torch_dispatch__.__code__)
