"""Where torch versions differ for the profiler: every version-dependent use of torch's internals is here.

The supported range is torch 2.8 to 2.15 (CI: 2.8, 2.13, 2.15). What differs, and how each is met:

* **Custom ops written in Python (torch 2.15).** ``torch.library.custom_op`` turns on the "PyObject
  dispatcher" fast path (``OpOverload._enable_pyobj_dispatch``): the op's dispatch keys are computed
  in Python and its Python kernel called directly, so the C++ dispatcher never runs the op and no
  ``at::RecordFunction`` names it. The native op tracer (a RecordFunction observer) then saw only the
  aten ops inside it (``nc_test::scale`` reported as ``aten::mul``); torch.profiler misses it the same
  way. A TorchDispatchMode (the Python tracer) still sees it. :func:`custom_ops_through_dispatcher`
  turns the fast path off for the custom ops defined so far while a native pass runs, and back on after.
  Torch 2.8 and 2.13 have no such path: nothing to do.
* **The autograd profiler's state** (``torch._C._autograd._profiler_enabled``): private, in every
  supported torch; :func:`profiler_enabled` answers False where a torch lacks it.
* **Which devices have a CUDA context** (``torch._C._cuda_hasPrimaryContext``): in every CUDA build of
  torch >= 2.0, absent from CPU builds; :func:`primary_context_probe` is None there.
* **Telling Dynamo to skip a code object** (``torch._C._dynamo.eval_frame.set_code_exec_strategy`` with
  ``_FrameExecStrategy``/``_FrameAction``, torch >= 2.6): :func:`skip_dynamo_frames` says False where
  the switch is missing or refuses.

Behaviour that differs by torch but is measured rather than assumed (whether Dynamo compiles under the
native function mode: ``backends.native_mode_compiles``) stays where it is measured. Nothing here
compares version strings: each difference is found by what the running torch has.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType
from typing import Any

import torch

__all__ = ["custom_ops_through_dispatcher", "primary_context_probe", "profiler_enabled", "skip_dynamo_frames"]


def _nothing_to_restore() -> None:
    """What :func:`custom_ops_through_dispatcher` returns where no op was switched."""


def custom_ops_through_dispatcher() -> Callable[[], None]:
    """Send every ``torch.library.custom_op`` defined so far through the C++ dispatcher, so that a
    RecordFunction observer sees it under its own name (torch 2.15's fast path skips the dispatcher);
    returns the function that turns the fast path back on for exactly those ops. Ops defined after
    the call keep the fast path. A no-op on torches without it."""
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:  # pragma: no cover - every supported torch has it
        return _nothing_to_restore
    switched = []
    for definition in list(OPDEFS.values()):
        overload = getattr(definition, "_opoverload", None)
        enabled = getattr(overload, "_is_pyobj_dispatcher_enabled", None)
        if enabled is not None and enabled():
            overload._enable_pyobj_dispatch(False)  # type: ignore[union-attr]
            switched.append(overload)
    if not switched:
        return _nothing_to_restore

    def restore() -> None:
        for overload in switched:
            overload._enable_pyobj_dispatch(True)

    return restore


def profiler_enabled() -> bool:
    """Whether torch.profiler or the autograd profiler collects on this thread."""
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except AttributeError:  # pragma: no cover - every supported torch has it
        return False


def primary_context_probe() -> Callable[[int], bool] | None:
    """``torch._C._cuda_hasPrimaryContext`` (whether a device ordinal has a CUDA context), or None on a
    torch built without CUDA."""
    return getattr(torch._C, "_cuda_hasPrimaryContext", None)


def skip_dynamo_frames(code: CodeType) -> bool:
    """Tell Dynamo never to compile ``code``, at no per-call cost; False where this torch has no such switch."""
    try:
        from torch._C._dynamo import eval_frame

        action: Any = eval_frame._FrameAction.SKIP
        eval_frame.set_code_exec_strategy(code, eval_frame._FrameExecStrategy(action, action))
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return False
    return True
