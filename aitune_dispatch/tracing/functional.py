"""The ``TorchFunctionMode`` that records a call for every ``torch.nn.functional`` function; a
Python-level functional runs as a gate-free copy with the mode re-armed so its nested functionals
are seen, and only calls inside the profiled hierarchy are sampled (``docs/design.md``, "Nested
functional calls")."""

from __future__ import annotations

import functools
import operator
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils._device import DeviceContext

from .. import schema
from .buffers import TraceBuffers
from .gates import GateFreeCopies
from .samples import SampleCollector

_is_compiling = torch.compiler.is_compiling
_NO_MODULE = schema.NO_MODULE

_mode_count = torch._C._len_torch_function_stack  # inside __torch_function__ our own mode is popped


def routing_mode_below() -> bool:
    """Whether a TorchFunctionMode below ours may want the call itself; DeviceContext does not count."""
    if not _mode_count():
        return False
    return any(type(mode) is not DeviceContext for mode in _get_current_function_mode_stack())


def _hands_itself_over(value: Any) -> bool:
    """A Python functional that calls ``handle_torch_function``: torch lists ``hardswish`` and
    ``hardsigmoid`` among the ignored functions, yet they dispatch to a function mode as themselves."""
    return isinstance(value, types.FunctionType) and "handle_torch_function" in value.__code__.co_names


def wrapped_chain(value: Any) -> list[Any]:
    """``value`` and its ``__wrapped__`` chain, outermost first."""
    chain = [value]
    while len(chain) < 16 and (inner := getattr(chain[-1], "__wrapped__", None)) is not None:
        if any(inner is seen for seen in chain):
            break
        chain.append(inner)
    return chain


def _torch_builtin(value: Any, name: str) -> bool:
    """A torch builtin of that name that torch does not ignore."""
    return (
        isinstance(value, types.BuiltinFunctionType)
        and getattr(value, "__name__", None) == name
        and (getattr(value, "__module__", None) or "").startswith("torch")
        and value not in torch.overrides.get_ignored_functions()
    )


# every functional registered in this process, by name: a user's replacement of a public name does not
# hide the original from later passes (their replacement may still call it)
_registered: dict[Callable[..., Any], str] = {}


@functools.lru_cache(maxsize=1)
def functional_registry() -> dict[Callable[..., Any], str]:
    """Every public ``torch.nn.functional`` function that dispatches to a function mode (a wrapped name
    registers what it wraps), by name."""
    overridable: set[Any] = set()
    for functions in torch.overrides.get_overridable_functions().values():
        overridable.update(functions)
    registry: dict[Callable[..., Any], str] = {}
    for name, value in sorted(vars(F).items()):
        if name.startswith("_") or not callable(value):
            continue
        for depth, candidate in enumerate(wrapped_chain(value)):
            try:
                known = candidate in overridable or _hands_itself_over(candidate)
                # a wrapped torch builtin: torch lists what the namespace held when it first looked
                known = known or (depth > 0 and _torch_builtin(candidate, name))
            except TypeError:  # unhashable callables are not torch functions
                continue
            if known and (candidate not in registry or getattr(candidate, "__name__", "") == name):
                registry[candidate] = name
    for func, name in _registered.items():
        registry.setdefault(func, name)
    _registered.update(registry)
    return registry


# modules whose public callables in torch.nn.functional are functionals (the rest are imports: typing,
# torch.overrides' dispatch helpers, torch._jit_internal.boolean_dispatch)
_FUNCTIONAL_MODULES = frozenset({"torch.nn.functional", "torch", "torch._C._nn", "torch._C._VariableFunctions"})
_NOT_FUNCTIONALS = frozenset(
    {"has_torch_function", "has_torch_function_unary", "has_torch_function_variadic", "assert_int_or_pair"}
)


def _public_functional(name: str, value: Any) -> bool:
    """A public function object of ``torch.nn.functional`` that computes something (not an import)."""
    if name.startswith("_") or name in _NOT_FUNCTIONALS:
        return False
    if not isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return False
    return (getattr(value, "__module__", None) or "") in _FUNCTIONAL_MODULES


_hooked_for: list[tuple[dict[Callable[..., Any], str], dict[Callable[..., Any], str], frozenset[Any]]] = []


def hook_registry() -> dict[Callable[..., Any], str]:
    """What the function-object hooks record: :func:`functional_registry` and every other public
    function of ``torch.nn.functional``, those without a ``has_torch_function`` gate included
    (``grouped_mm``, ``scaled_mm``, ``sigmoid``, ``tanh``, the in-place builtins such as ``relu_``),
    which no ``TorchFunctionMode`` sees; the same dict object until the registry is rebuilt (the
    native tracer reuses what it interned for it)."""
    base = functional_registry()
    if _hooked_for and _hooked_for[0][0] is base:
        return _hooked_for[0][1]
    registry = dict(base)
    named = set(registry.values())
    for name, value in sorted(vars(F).items()):
        if name not in named and _public_functional(name, value):
            registry.setdefault(value, name)
    # the gate-free builtins are torch's in-place variants (relu_ is torch.relu_), which torch's own
    # functionals call (relu(x, inplace=True)): inside another call they are part of it
    outermost = frozenset(f for f in registry if f not in base and isinstance(f, types.BuiltinFunctionType))
    _hooked_for[:] = [(base, registry, outermost)]
    return registry


def hooked_outermost_only() -> frozenset[Any]:
    """The objects of :func:`hook_registry` recorded only where no other functional call is open: the
    in-place builtins without a ``has_torch_function`` gate (``relu_``, ``elu_``, ``hardtanh_``, ...).
    ``F.relu_`` *is* ``torch.relu_``, which ``F.relu(x, inplace=True)`` calls; the mode never sees it and
    the reference, which patches the names of ``torch.nn.functional``, sees it only where the user calls
    ``F.relu_`` itself, so inside another functional call it is part of that call."""
    hook_registry()
    return _hooked_for[0][2]


# torch-level APIs that only read metadata: never a call of their own under ``functions="all"``
_METADATA_APIS = frozenset(
    {
        "shape", "dtype", "device", "ndim", "layout", "requires_grad", "is_cuda", "is_sparse",
        "is_quantized", "is_meta", "is_nested", "grad_fn", "names", "size", "dim", "stride",
        "numel", "nelement", "is_contiguous", "data_ptr", "element_size", "storage_offset",
        "is_floating_point", "is_complex", "__len__", "__hash__", "get_device", "ndimension",
    }
)


def _unlisted_name(func: Callable[..., Any]) -> str:
    """The name of an API ``torch.overrides`` does not list (it leaves out torch's private functions):
    ``torch._foreach_add`` for a function of a torch module, as its public ones are named, rather than
    the builtin's ``_VariableFunctionsClass._foreach_add``; the shortest torch package that exposes the
    function under its name wins (``torch.distributed.all_reduce``, not ``...distributed_c10d.all_reduce``);
    the qualified name of anything else."""
    qualname = getattr(func, "__qualname__", None)
    if not isinstance(qualname, str) or not qualname:
        return repr(func)
    module, (owner, _, name) = getattr(func, "__module__", None), qualname.rpartition(".")
    if isinstance(module, str) and module.split(".")[0] == "torch" and owner in ("", "_VariableFunctionsClass"):
        parts = module.split(".")
        for end in range(1, len(parts)):
            package = ".".join(parts[:end])
            if getattr(sys.modules.get(package), name, None) is func:
                return f"{package}.{name}"
        return f"{module}.{name}"
    return qualname


@functools.lru_cache(maxsize=4096)
def api_name(func: Callable[..., Any]) -> str | None:
    """``torch.addmm`` / ``torch.Tensor.__add__`` for a torch-level API; None for metadata reads."""
    name = torch.overrides.resolve_name(func) or _unlisted_name(func)
    if name.endswith(".__get__"):
        name = name[: -len(".__get__")]
    if name.rpartition(".")[2] in _METADATA_APIS:
        return None
    return name


def may_call_functional(root: types.FunctionType) -> bool:
    """Whether a Python functional can reach another through its globals and closures, transitively;
    ``torch.nn.functional`` reached as an attribute counts, to stay safe."""
    registry = functional_registry()
    seen: set[int] = {id(root)}
    pending: list[types.FunctionType] = [root]
    while pending:
        function = pending.pop()
        code = function.__code__
        if "functional" in code.co_names:
            return True
        cells = [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
        targets = [function.__globals__.get(name) for name in code.co_names] + cells
        for target in targets:
            if target is None or id(target) in seen:
                continue
            seen.add(id(target))
            if _is_registered(target, registry):
                return True
            if isinstance(target, types.FunctionType):
                pending.append(target)
    return False


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _is_registered(target: Any, registry: dict[Callable[..., Any], str]) -> bool:
    try:
        return target in registry
    except TypeError:  # unhashable
        return False


_rearm_copies = GateFreeCopies()


@functools.cache
def rearmed_copy(func: Callable[..., Any]) -> types.FunctionType | None:
    """The gate-free copy a Python functional that reaches another runs as, or None to run ``func``."""
    if type(func) is types.FunctionType and may_call_functional(func):
        return _rearm_copies.copy(func)
    return None


# what torch.nn.functional held when the registry was last built (kept alive, so compared by identity)
_namespace_read: list[tuple[tuple[str, ...], tuple[Any, ...]]] = []


def refresh_functionals() -> None:
    """Re-read ``torch.nn.functional`` before a pass, so replacements made between passes are what the
    copies call (``docs/design.md``, "Nested functional calls"); the registry is rebuilt only where a
    name of the namespace is bound to another object than when it was built."""
    namespace = vars(F)
    names, values = tuple(namespace), tuple(namespace.values())
    if _namespace_read:
        read_names, read_values = _namespace_read[0]
        unchanged = names == read_names and all(map(operator.is_, values, read_values))
    else:
        unchanged = False
    if not unchanged:
        before = functional_registry()
        functional_registry.cache_clear()
        if functional_registry().keys() != before.keys():
            rearmed_copy.cache_clear()  # whether a functional reaches another may have changed
        _namespace_read[:] = [(names, values)]
    _rearm_copies.refresh()


def functional_names() -> frozenset[str]:
    """The names this profiler recognises as functional calls."""
    return frozenset(functional_registry().values())


def functions_to_intercept(module: types.ModuleType = F) -> list[tuple[str, Callable[..., Any]]]:
    """The ``(name, function)`` pairs whose calls the profiler intercepts, sorted by name.

    The reference's ``get_functions_to_patch()``, informational: nothing is patched (a
    ``TorchFunctionMode`` sees the calls), whatever ``function_names`` says; torch-level APIs that
    ``functions="all"`` adds are left out.

    Parameters
    ----------
    module:
        ``torch.nn.functional`` (the default), the only namespace listed.

    Returns
    -------
    list[tuple[str, Callable]]
        Sorted by name, e.g. ``("linear", torch.nn.functional.linear)``.

    Raises
    ------
    ValueError
        ``module`` is another module.
    """
    if module is not F:
        name = getattr(module, "__name__", module)
        raise ValueError(
            f"get_functions_to_patch() lists torch.nn.functional only; got module {name!r}: call "
            "get_functions_to_patch() (functions='all' also intercepts torch-level APIs, which it does not list)"
        )
    pairs: dict[str, Callable[..., Any]] = {}
    for func, name in functional_registry().items():
        current = getattr(F, name, None)
        # one pair per name: what the name holds now where it is (or wraps) an intercepted function;
        # a wrapper's calls are intercepted where they reach the function it wraps
        wraps = current is not None and any(inner is func for inner in wrapped_chain(current))
        pairs[name] = current if wraps else pairs.get(name, func)
    return sorted(pairs.items(), key=lambda pair: pair[0])


class FunctionalMode(TorchFunctionMode):
    """Records one functional call per intercepted function; one instance serves one pass."""

    def __init__(self, buffers: TraceBuffers, samples: SampleCollector, all_functions: bool = False) -> None:
        super().__init__()
        self._buffers = buffers
        self._samples = samples
        self._all = all_functions
        self._functional_ids: set[int] = set()
        self._registry = functional_registry()
        self._name_ids: dict[Callable[..., Any], int] = {}

    def _name_id(self, func: Callable[..., Any], name: str) -> int:
        found = self._name_ids.get(func)
        if found is None:
            found = self._name_ids[func] = self._buffers.function_names.id(name)
        return found

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types_: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = self._registry.get(func)
        if name is None and not self._all:  # the hot path: every other torch call, metadata reads too
            return func(*args, **(kwargs or {}))
        if kwargs is None:
            kwargs = {}
        if _is_compiling():  # Dynamo traces through modes: compiled regions run as compiled
            return func(*args, **kwargs)
        if name is None:
            return self._torch_level_call(func, args, kwargs)
        stacks = self._buffers.stacks()
        if stacks.reentered and stacks.reentered[-1] is func:
            # the gate-free copy of ``func`` called back through its public name: same call
            return func(*args, **kwargs)
        sample = self._samples.observe(name, args, kwargs) if stacks.modules[-1] != _NO_MODULE else -1
        name_id = self._name_id(func, name)
        self._functional_ids.add(name_id)
        return self._run_call(func, name_id, stacks, args, kwargs, sample)

    def _torch_level_call(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``functions="all"``: a torch-level API call counts where no functional call encloses it."""
        stacks = self._buffers.stacks()
        name = api_name(func)
        if name is None or (stacks.calls[-1] != -1 and self._encloses_functional(stacks)):
            return func(*args, **kwargs)
        explicit = stacks.modules[-1] != _NO_MODULE and self._samples.wants_explicitly(name)
        sample = self._samples.observe(name, args, kwargs) if explicit else -1
        # run as-is: what a torch-level API does inside is its own (no re-armed nested calls)
        call_id = self._buffers.begin_call(self._name_id(func, name), stacks, sample)
        try:
            return func(*args, **kwargs)
        finally:
            self._buffers.end_call(call_id, stacks)

    def _encloses_functional(self, stacks: Any) -> bool:
        names = self._buffers.call_name
        return any(names[call] in self._functional_ids for call in stacks.calls[1:])

    def _run_call(
        self,
        func: Callable[..., Any],
        name_id: int,
        stacks: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sample: int,
    ) -> Any:
        call_id = self._buffers.begin_call(name_id, stacks, sample)
        copy = rearmed_copy(func)
        try:
            # another TorchFunctionMode below ours (aitune_dispatch.activate, a user's mode) must see
            # the call itself: the gate-free copy would skip it, so the original runs instead
            if copy is not None and not routing_mode_below():
                stacks.reentered.append(func)
                try:
                    with self:
                        return copy(*args, **kwargs)
                finally:
                    stacks.reentered.pop()
            return func(*args, **kwargs)
        finally:
            self._buffers.end_call(call_id, stacks)

