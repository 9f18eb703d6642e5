"""``activate()``: route functional calls to candidate implementations during inference.

A ``TorchFunctionMode`` sees every ``torch.nn.functional`` call; for an activated function it calls
the candidate instead of the original, for every call or, with ``only=`` a :func:`benchmark`
table, for the samples on which the candidate validated (``ok``) only. Nothing in torch is
replaced: leaving the block (normally or by an exception) pops the mode and everything is as
before. Inside ``__torch_function__`` torch has popped the mode, so a candidate that calls the
original function (``F.linear`` inside ``my_linear``) reaches the original, not itself.

Profiling inside an activation (``with activate(...): profiler.profile(...)``) records the call
as the original functional call, in its module, with the candidate's kernels: the profiler's
mode sits above this one and hands the call down to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pandas as pd
from torch.overrides import TorchFunctionMode

from ..tracing.functional import functional_registry
from ..tracing.samples import sample_key
from .candidates import normalize_candidates, original_function
from .replay import validated_keys


@dataclass
class _Route:
    function_name: str
    implementation: str
    candidate: Callable[..., Any]
    keys: frozenset[Any] | None  # None: every call


class _RoutingMode(TorchFunctionMode):
    """Calls the route's candidate for the functions it maps; single use (one per ``__enter__``)."""

    def __init__(self, routes: dict[Callable[..., Any], _Route], routed: dict[str, int]) -> None:
        super().__init__()
        self._routes = routes
        self._routed = routed

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        route = self._routes.get(func)
        if kwargs is None:
            kwargs = {}
        if route is None:  # every other torch call, tensor methods included
            return func(*args, **kwargs)
        # the key of the call as the profiler keys it: (args as received, kwargs as received)
        if route.keys is not None and (sample_key(args), sample_key(kwargs)) not in route.keys:
            return func(*args, **kwargs)
        self._routed[route.function_name] += 1
        return route.candidate(*args, **kwargs)


def _functions_named(function_name: str) -> list[Callable[..., Any]]:
    """Every callable the function mode may be handed for ``function_name``."""
    found = [func for func, name in functional_registry().items() if name == function_name]
    if not found and function_name.startswith("torch."):
        found = [original_function(function_name)]
    if not found:
        raise ValueError(
            f"{function_name!r} is not a torch.nn.functional function this package intercepts (nor a torch-level "
            "API such as 'torch.addmm'); use the names of ProfileResult.function_data"
        )
    return found


class Activation:
    """The context manager :func:`activate` returns; ``routed`` counts the calls sent to each candidate.

    Not reentrant; one ``with`` block at a time (make another ``activate()`` for a nested block).
    """

    def __init__(self, routes: list[_Route]) -> None:
        self._routes = {func: route for route in routes for func in _functions_named(route.function_name)}
        self.routed: dict[str, int] = {route.function_name: 0 for route in routes}
        self._mode: _RoutingMode | None = None

    @property
    def implementations(self) -> dict[str, str]:
        """``function name -> candidate name`` of this activation."""
        return {route.function_name: route.implementation for route in self._routes.values()}

    def __enter__(self) -> Activation:
        if self._mode is not None:
            raise RuntimeError("this activation is already active; call activate() again for a nested block")
        mode = _RoutingMode(self._routes, self.routed)
        mode.__enter__()
        self._mode = mode
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(exc_type, exc, tb)


def _single(function_name: str, named: dict[str, Callable[..., Any]]) -> tuple[str, Callable[..., Any]]:
    if len(named) != 1:
        raise ValueError(
            f"activate() routes {function_name!r} to one candidate; got {len(named)} ({sorted(named)}); pass one"
        )
    return next(iter(named.items()))


def activate(
    candidates: Mapping[str, Callable[..., Any] | Mapping[str, Callable[..., Any]]],
    *,
    only: pd.DataFrame | None = None,
) -> Activation:
    """Route intercepted functional calls to candidates inside a ``with`` block.

    Parameters
    ----------
    candidates:
        ``{"linear": my_linear}`` (the candidate's name is its ``__qualname__``) or
        ``{"linear": {"mine": my_linear}}`` to name it as in the benchmark; one per function.
    only:
        A :func:`benchmark` table: route only the calls whose sample the candidate validated on
        (``ok``), every other call runs the original. None routes every call.

    Returns
    -------
    Activation
        The context manager; ``activation.routed[name]`` counts the calls sent to the candidate.
    """
    if only is not None and not isinstance(only, pd.DataFrame):
        raise TypeError(f"only= must be the DataFrame benchmark() returned; got {type(only).__name__}")
    routes = []
    for function_name, named in normalize_candidates(candidates).items():
        implementation, candidate = _single(function_name, named)
        keys = validated_keys(only, function_name, implementation) if only is not None else None
        routes.append(_Route(function_name, implementation, candidate, keys))
    return Activation(routes)
