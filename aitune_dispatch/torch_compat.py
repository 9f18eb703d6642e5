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
* **What a Dynamo callback wraps** (the chain from a compile context's callback down to the backend
  ``torch.compile`` was given): ``_torchdynamo_orig_backend`` on each link in later torches (2.13, 2.15),
  ``_torchdynamo_orig_callable`` in torch 2.8 (where the later name is absent);
  :func:`wrapped_backend` reads either.
* **Inductor's provenance hook** (``torch._inductor.debug.set_kernel_post_grad_provenance_tracing``,
  called once per kernel call site it generates): in torch 2.13 and 2.15. Torch 2.8 has it in
  ``torch._inductor.utils`` but calls it only under ``config.trace.enabled`` (which writes Inductor's
  debug trace to disk), so it is not observed there: compiled kernels stay on the module whose forward
  was compiled (with a warning);
  :func:`provenance_tracing_available` says which. :data:`PROVENANCE_HOOK` is its name.
* **Which frame Dynamo compiles, and its cache** (``InstructionTranslator.current_tx()`` and
  ``torch._C._dynamo.eval_frame._debug_get_cache_entry_list``): private; :func:`dynamo_frame_code` and
  :func:`dynamo_cache_entries` answer None and ``[]`` where a torch lacks them.
* **Higher-order operators under a TorchDispatchMode** (eager ``flex_attention``): torch 2.13 and 2.15
  hand them to a mode that declares ``supports_higher_order_operators``; torch 2.8 refuses any mode
  without a rule registered for its type, so :func:`higher_order_operators_handed_to` registers one
  for the Python op tracer's mode during its pass (and removes it after).
* **Compiling under a TorchDispatchMode** (``TorchDispatchMode.ignore_compile_internals``, in 2.13 and 2.15):
  torch 2.8's Dynamo runs every frame eagerly while a non-infra dispatch mode is on the stack, so under
  the pure-Python op tracer compiled code runs eagerly there; :func:`dispatch_mode_compiles` says which.
* **Telling Dynamo to skip a code object** (``torch._C._dynamo.eval_frame.set_code_exec_strategy`` with
  ``_FrameExecStrategy``/``_FrameAction``, torch >= 2.6): :func:`skip_dynamo_frames` says False where
  the switch is missing or refuses.

* **Autograd's position** (``torch._C._autograd._get_sequence_nr``: the calling thread's next node number,
  and ``torch._C._current_autograd_node``: the node the engine evaluates on this thread): private, in
  every supported torch; the Python op tracer reads them through :func:`next_sequence_nr` and
  :func:`current_autograd_node`, which answer 0 and None where a torch lacks them (nothing is linked then).

Behaviour that differs by torch but is measured rather than assumed (whether Dynamo compiles under the
native function mode: ``backends.native_mode_compiles``) stays where it is measured. Nothing here
compares version strings: each difference is found by what the running torch has.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import CodeType
from typing import Any

import torch

__all__ = [
    "PROVENANCE_HOOK",
    "custom_ops_through_dispatcher",
    "dispatch_mode_compiles",
    "dispatch_mode_runs_higher_order_operators",
    "dynamo_cache_entries",
    "dynamo_frame_code",
    "higher_order_operators_handed_to",
    "primary_context_probe",
    "profiler_enabled",
    "provenance_tracing_available",
    "skip_dynamo_frames",
    "wrapped_backend",
]

PROVENANCE_HOOK = "set_kernel_post_grad_provenance_tracing"  # in torch._inductor.debug (not in torch 2.8)

# what each link of a Dynamo callback chain calls the link it wraps: newer torches first, then torch 2.8
_BACKEND_LINKS = ("_torchdynamo_orig_backend", "_torchdynamo_orig_callable")


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


next_sequence_nr: Callable[[], int] = getattr(torch._C._autograd, "_get_sequence_nr", lambda: 0)
"""The calling thread's next autograd sequence number: the number the next node it creates gets."""

_current_node: Callable[[], Any] = getattr(torch._C, "_current_autograd_node", lambda: None)
_NO_SEQUENCE_NR = 1 << 63  # AccumulateGrad's number (UINT64_MAX), as Python sees it


def current_autograd_node() -> int | None:
    """The sequence number of the node autograd's engine evaluates on this thread (-1 for a node without
    one, an AccumulateGrad), or None outside backward."""
    node = _current_node()
    if node is None:
        return None
    seq = int(node._sequence_nr())
    return -1 if seq >= _NO_SEQUENCE_NR else seq


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


def wrapped_backend(attributes: dict[str, Any]) -> Any:
    """The next link below a Dynamo callback or backend wrapper, from its instance ``attributes`` (so no
    ``__getattr__`` runs): what it wraps, towards the backend ``torch.compile`` was given; None at the end."""
    for name in _BACKEND_LINKS:
        link = attributes.get(name)
        if link is not None:
            return link
    return None


def provenance_tracing_available() -> bool:
    """Whether this torch's Inductor calls :data:`PROVENANCE_HOOK` for each kernel call site it generates
    (what attributes compiled kernels to modules, functional calls and ops); imports Inductor's debug module."""
    try:
        import torch._inductor.debug as debug
    except Exception:  # noqa: BLE001 - a torch whose Inductor cannot be imported here has no hook either
        return False
    return callable(getattr(debug, PROVENANCE_HOOK, None))


def dispatch_mode_compiles() -> bool:
    """Whether Dynamo compiles code while a TorchDispatchMode that declares ``ignore_compile_internals``
    (the Python op tracer's) is active; False on torch 2.8, whose Dynamo then runs frames eagerly."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return callable(getattr(TorchDispatchMode, "ignore_compile_internals", None))


def dispatch_mode_runs_higher_order_operators() -> bool:
    """Whether a TorchDispatchMode that declares ``supports_higher_order_operators`` (the Python op
    tracer's) lets higher-order operators such as eager ``flex_attention`` run under it; False on torch
    2.8, whose operators refuse every mode without a rule registered for its type (NotImplementedError)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return hasattr(TorchDispatchMode, "supports_higher_order_operators")


def higher_order_operators_handed_to(mode_type: type) -> Callable[[], None]:
    """Let every higher-order operator defined so far run under a TorchDispatchMode of ``mode_type``,
    handing each call to its ``__torch_dispatch__`` (as later torches do for a mode that declares
    ``supports_higher_order_operators``); returns the function that removes exactly those rules.

    Torch 2.8 refuses an operator under any mode without a rule registered for the mode's type
    (NotImplementedError), so eager ``flex_attention`` broke the Python op tracer's pass; the rule
    is what torch's own ``py_impl(mode_type)`` would register, called with the mode popped. A no-op
    where the torch hands the operators over itself."""
    if dispatch_mode_runs_higher_order_operators():
        return _nothing_to_restore
    try:
        from torch._ops import _higher_order_ops
    except ImportError:  # pragma: no cover - every supported torch has it
        return _nothing_to_restore
    added = []
    for operator in list(_higher_order_ops.values()):
        table = getattr(operator, "python_key_table", None)
        if isinstance(table, dict) and mode_type not in table:
            table[mode_type] = functools.partial(_handed_to_mode, operator)
            added.append(table)
    if not added:
        return _nothing_to_restore

    def restore() -> None:
        for table in added:
            table.pop(mode_type, None)

    return restore


def _handed_to_mode(operator: Any, mode: Any, *args: Any, **kwargs: Any) -> Any:
    """A higher-order operator's call as ``mode.__torch_dispatch__`` receives an op's (torch 2.8's rule)."""
    return mode.__torch_dispatch__(operator, (), args, kwargs)


def dynamo_frame_code() -> CodeType | None:
    """The code object of the frame Dynamo is compiling on this thread; None outside Dynamo (Inductor
    called directly) or on a torch without this introspection."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        return InstructionTranslator.current_tx().f_code
    except Exception:  # noqa: BLE001 - not inside Dynamo, or another torch's internals
        return None


def dynamo_cache_entries(code: CodeType) -> list[Any]:
    """Dynamo's cache entries for ``code`` (each holds a compiled code object and its compile id); ``[]``
    where none, or on a torch without this introspection."""
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

        return list(_debug_get_cache_entry_list(code))
    except Exception:  # noqa: BLE001 - another torch's internals: no instance is matched by path
        return []
