"""Which ``torch.compile`` backends compiled the code a ``profile()`` runs, and the warning where one is
not Inductor: only Inductor records where each kernel came from, so another backend's graphs lose
their functional calls or their modules (``docs/compiled.md``, "Backends other than Inductor").

The backend is read from the compile wrappers profile() already looks at (the profiled callable,
the hierarchy's modules, the wrappers standing for them), from their instance dicts and closures
only, so no ``__getattr__`` of a wrapper runs.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

from torch import nn

from ..torch_compat import wrapped_backend

__all__ = ["INDUCTOR", "backend_of", "compile_backends", "non_inductor_warning"]

INDUCTOR = "inductor"
_CHAIN = 16  # wrappers between a compile context and the backend it was given, at most


def _dict(value: Any) -> dict[str, Any]:
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return {}
    return attributes if type(attributes) is dict else {}


def _callbacks(compiled: Any) -> Iterator[Any]:
    """The Dynamo callbacks a compiled object holds: a wrapper's ``dynamo_ctx``, or what the function
    ``torch.compile`` returned (a module's in-place ``_compiled_call_impl`` is one) closes over."""
    context = _dict(compiled).get("dynamo_ctx")
    if context is not None:
        yield _dict(context).get("callback")
    function = _dict(compiled).get("_compiled_call_impl", compiled)
    if type(function) is types.FunctionType and "_torchdynamo_orig_callable" in function.__dict__:
        for cell in function.__closure__ or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            yield _dict(content).get("callback", content)


def backend_of(compiled: Any) -> str | None:
    """The name ``torch.compile`` gave the backend of ``compiled`` (``"inductor"``, ``"aot_eager"``, a
    function's name), or None where ``compiled`` is not compiled or the name cannot be read."""
    for callback in _callbacks(compiled):
        name, link = None, callback
        for _ in range(_CHAIN):  # the innermost name wins: the one torch.compile was given
            if link is None:
                break
            found = _dict(link).get("compiler_name") or getattr(type(link), "compiler_name", None)
            name = found if isinstance(found, str) else name
            link = wrapped_backend(_dict(link))
        if name is not None:
            return name
    return None


def compile_backends(function: Any, root: nn.Module, stand_ins: tuple[nn.Module, ...] = ()) -> tuple[str, ...]:
    """The backends of the compiled code profile() knows ``function`` runs: ``function`` itself, the
    modules of ``root``'s hierarchy (compiled children, modules compiled in place, the compiled calls
    they keep) and ``stand_ins``; each name once, sorted."""
    if "torch._dynamo" not in sys.modules:
        return ()  # nothing was compiled in this process
    modules = list(root.modules())
    held = [value for module in modules for value in _dict(module).values() if type(value) is types.FunctionType]
    names = {backend_of(candidate) for candidate in (function, *modules, *stand_ins, *held)}
    return tuple(sorted(name for name in names if name is not None))


def _effect(backend: str) -> str:
    if backend == "eager":
        return (
            "'eager' runs the graph's torch calls without the forwards of the modules inside it, so each "
            "kernel keeps its functional call but goes to the module whose forward was compiled, or to no "
            "module, and out of profiling_df, where the module's call itself was compiled (model.compile(), "
            "a compiled function calling the model)"
        )
    if backend.startswith("aot_"):
        return (
            f"{backend!r} runs the graph as aten ops, outside any functional call, so none of its kernels is in "
            "profiling_df (last_result.unattributed() has them)"
        )
    return (
        f"{backend!r} runs code profile() cannot trace back to functional calls and modules, so its kernels "
        "are missing from profiling_df or go to the module whose forward was compiled"
    )


def non_inductor_warning(backends: tuple[str, ...]) -> list[str]:
    """One message for the backends other than Inductor among ``backends``; none where all are Inductor."""
    others = [backend for backend in backends if backend != INDUCTOR]
    if not others:
        return []
    named = ", ".join(f"backend={backend!r}" for backend in others)
    effects = "; ".join(_effect(backend) for backend in others)
    return [
        f"torch.compile({named}) compiled code this profile() ran: profile() attributes compiled kernels to "
        f"functional calls and modules only for Inductor, which records where each kernel came from. Backend "
        f"{effects}. Compile with the default backend (backend='inductor'), or keep "
        "the region you want to see eager with torch.compiler.disable (docs/compiled.md, \"Backends other "
        "than Inductor\")"
    ]
