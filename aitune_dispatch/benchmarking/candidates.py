"""Naming and resolving implementations: the original functional call and the user's candidates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..results.work import resolve_function

ORIGINAL = "torch"  # the implementation name of the original function in every table

CandidatesArg = Mapping[str, Callable[..., Any] | Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]]]


def candidate_name(function: Callable[..., Any]) -> str:
    """A candidate's default name: its ``__qualname__`` without ``outer.<locals>.`` (else ``__name__``, its type's)."""
    for attribute in ("__qualname__", "__name__"):
        name = getattr(function, attribute, None)
        if isinstance(name, str) and name:
            return name.rpartition("<locals>.")[2]
    return type(function).__qualname__


def _named(function_name: str, value: Any) -> dict[str, Callable[..., Any]]:
    if callable(value) and not isinstance(value, Mapping):
        items: list[tuple[str, Any]] = [(candidate_name(value), value)]
    elif isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = [(candidate_name(item), item) for item in value]
    else:
        raise TypeError(
            f"candidates[{function_name!r}] must be a callable, a list of callables or a dict of "
            f"name -> callable; got {type(value).__name__}"
        )
    named: dict[str, Callable[..., Any]] = {}
    for name, item in items:
        if not isinstance(name, str) or not name:
            raise TypeError(f"candidate names for {function_name!r} must be non-empty strings; got {name!r}")
        if not callable(item):
            raise TypeError(f"candidate {name!r} for {function_name!r} is a {type(item).__name__}, not a callable")
        if name == ORIGINAL:
            raise ValueError(
                f"a candidate for {function_name!r} is named {ORIGINAL!r}, the name of the original; "
                f"pass a dict with another name, e.g. {{{function_name!r}: {{'mine': fn}}}}"
            )
        if name in named:
            raise ValueError(
                f"two candidates for {function_name!r} are both named {name!r}; pass a dict of distinct "
                f"names, e.g. {{{function_name!r}: {{'{name}_a': first, '{name}_b': second}}}}"
            )
        named[name] = item
    return named


def normalize_candidates(candidates: CandidatesArg | None) -> dict[str, dict[str, Callable[..., Any]]]:
    """``function name -> {implementation name -> callable}``, in order; a TypeError / ValueError names a bad entry."""
    if candidates is None:
        return {}
    if not isinstance(candidates, Mapping):
        raise TypeError(f"candidates must be a dict such as {{'linear': my_linear}}; got {type(candidates).__name__}")
    normalized = {}
    for function_name, value in candidates.items():
        if not isinstance(function_name, str):
            raise TypeError(f"candidates keys must be function names such as 'linear'; got {function_name!r}")
        normalized[function_name] = _named(function_name, value)
    return normalized


def original_function(function_name: str) -> Callable[..., Any]:
    """``F.<name>``, or a torch-level API (``torch.Tensor.add``); LookupError where the name does not resolve."""
    target = resolve_function(function_name)
    if target is None:
        raise LookupError(
            f"{function_name!r} is neither a torch.nn.functional function nor a torch-level API in this torch "
            f"({torch.__version__}); it cannot be replayed here"
        )
    return target
