"""``activate()``: route functional calls to candidate implementations during inference.

A ``TorchFunctionMode`` calls the candidate for every call, or, with ``only=`` a :func:`benchmark`
table, on the samples it validated on and was fast enough on; nothing in torch is replaced
(``docs/design.md``, "Replay").
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pandas as pd
from torch.overrides import TorchFunctionMode

from ..tracing.functional import functional_registry
from ..tracing.samples import call_key
from .candidates import normalize_candidates, original_function
from .replay import benchmarked_samples

SKIPPED_COLUMNS = ["function_name", "implementation", "sample", "calls", "speedup", "reason"]
_LISTED = 5  # samples a warning names; Activation.skipped has them all


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
        # keyed as benchmark() keyed the recorded samples, however the arguments were passed
        if route.keys is not None and call_key(func, args, kwargs) not in route.keys:
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
    """The context manager :func:`activate` returns; not reentrant (make another for a nested block).

    ``routed`` counts the calls sent to each candidate; ``skipped`` has a row (:data:`SKIPPED_COLUMNS`)
    per sample of ``only=`` left to the original, with the ``reason``.
    """

    def __init__(self, routes: list[_Route], skipped: pd.DataFrame | None = None) -> None:
        self._routes = {func: route for route in routes for func in _functions_named(route.function_name)}
        self.routed: dict[str, int] = {route.function_name: 0 for route in routes}
        self.skipped: pd.DataFrame = _skipped_frame([]) if skipped is None else skipped
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


def _check_min_speedup(min_speedup: Any) -> float | None:
    if min_speedup is None:
        return None
    usage = "min_speedup must be a positive number (1.0: at least as fast as the original) or None (any speed)"
    if isinstance(min_speedup, bool) or not isinstance(min_speedup, numbers.Real):
        raise TypeError(f"{usage}; got {type(min_speedup).__name__} {min_speedup!r}")
    if not (math.isfinite(min_speedup) and min_speedup > 0):
        raise ValueError(f"{usage}; got {min_speedup!r}")
    return float(min_speedup)


def _ratio(speedup: float) -> str:
    return f"{speedup:.4g}x"


def _skip_reason(row: Any, min_speedup: float | None) -> tuple[str, str] | None:
    """``(short, reason)`` why the candidate's row of one sample is not routed, or None when it is."""
    if not row.ok:
        return "not validated", f"not validated: {row.error or 'not ok'}"
    if min_speedup is None:
        return None
    speedup = float(row.speedup)
    if math.isnan(speedup):
        cause = "its timed calls launched no kernel" if row.us_per_call == 0 else "the original was not timed"
        return "speedup unknown", f"speedup unknown ({cause})"
    if speedup < min_speedup:
        return _ratio(speedup), f"slower than min_speedup={min_speedup} ({_ratio(speedup)})"
    return None


def _selected_keys(
    table: pd.DataFrame, function_name: str, implementation: str, min_speedup: float | None
) -> tuple[frozenset[Any], list[dict[str, Any]], int]:
    """The call keys of the samples to route, a record per sample left to the original, and the samples."""
    rows, keys = benchmarked_samples(table, function_name, implementation)
    routed, skipped = [], []
    for row in rows.itertuples():
        why = _skip_reason(row, min_speedup)
        if why is not None:
            record = (function_name, implementation, int(row.sample), int(row.calls), float(row.speedup), why[1])
            skipped.append({**dict(zip(SKIPPED_COLUMNS, record)), "short": why[0]})
        elif row.sample in keys:
            routed.append(keys[row.sample])
    return frozenset(routed), skipped, len(rows)


def _skipped_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(records, columns=SKIPPED_COLUMNS)  # the warning's "short" left out
    return frame.astype({"sample": "int64", "calls": "int64", "speedup": float})


def _warn_skipped(skipped: list[dict[str, Any]], samples: int, min_speedup: float | None) -> None:
    """One warning per activate() that names the samples left to the original (the first few) and why."""
    if not skipped:
        return
    named = [f"{s['function_name']}/{s['implementation']} sample {s['sample']} ({s['short']})" for s in skipped]
    more = f" and {len(named) - _LISTED} more" if len(named) > _LISTED else ""
    shorts = {s["short"] for s in skipped} - {"not validated"}
    kinds = [f"slower than min_speedup={min_speedup}"] if shorts - {"speedup unknown"} else []
    kinds += ["of unknown speed"] if "speedup unknown" in shorts else []
    hint = f"; {' or '.join(kinds)}: pass min_speedup=None (or a lower one) to route those anyway" if kinds else ""
    warnings.warn(
        f"activate(): {len(skipped)} of {samples} samples run the original: {', '.join(named[:_LISTED])}{more}"
        f"{hint}; activation.skipped says why for each",
        RuntimeWarning,
        stacklevel=3,
    )


def activate(
    candidates: Mapping[str, Callable[..., Any] | Mapping[str, Callable[..., Any]]],
    *,
    only: pd.DataFrame | None = None,
    min_speedup: float | None = 1.0,
) -> Activation:
    """Route intercepted functional calls to candidates inside a ``with`` block.

    Parameters
    ----------
    candidates:
        ``{"linear": my_linear}`` (named by its ``__qualname__``) or ``{"linear": {"mine": my_linear}}``
        to name it as in the benchmark; one per function.
    only:
        A :func:`benchmark` table: route only the samples the candidate validated on (``ok``) and
        met ``min_speedup`` on; the others run the original. None routes every call.
    min_speedup:
        With ``only=``: the least ``speedup`` (original's time over the candidate's) routed; 1.0:
        never slower; 0.9: up to 10 % slower; None: every validated sample, even of unknown speed.

    Returns
    -------
    Activation
        ``routed[name]`` counts the calls sent to the candidate; ``skipped`` lists the samples of
        ``only=`` left to the original and why, and a RuntimeWarning names them.
    """
    if only is not None and not isinstance(only, pd.DataFrame):
        raise TypeError(f"only= must be the DataFrame benchmark() returned; got {type(only).__name__}")
    threshold = _check_min_speedup(min_speedup)
    routes, skipped, samples = [], [], 0
    for function_name, named in normalize_candidates(candidates).items():
        implementation, candidate = _single(function_name, named)
        keys = None
        if only is not None:
            keys, left, count = _selected_keys(only, function_name, implementation, threshold)
            samples, skipped = samples + count, skipped + left
        routes.append(_Route(function_name, implementation, candidate, keys))
    _warn_skipped(skipped, samples, threshold)
    return Activation(routes, _skipped_frame(skipped))
