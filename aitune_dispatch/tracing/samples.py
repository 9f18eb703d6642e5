"""Distinct input samples of functional calls with their call counts: two calls are one sample when
their structure, tensor metadata and other values agree (``docs/design.md``, "Samples")."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..schema import FunctionData, Sample
from ..tensors import nested_parts, tensor_strides
from .unseen import unseen

__all__ = ["FunctionData", "Sample", "SampleCollector", "call_key", "sample_key", "sample_pair_key"]

_Tensor = torch.Tensor
# values that are their own key once their type is part of it (the type keeps True and 1 apart)
_PLAIN = frozenset({int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})


def _tensor_key(value: torch.Tensor) -> tuple[Any, ...]:
    if value.is_nested:
        # its parts' shapes; unbind() and jagged metadata reads dispatch ops, hidden from every mode
        with _disable_current_modes():
            return (_Tensor, nested_parts(value), value.dtype, value.layout, value.device, True)
    return (_Tensor, value.shape, value.dtype, value.layout, value.device, tensor_strides(value))


def _plain_key(value: Any) -> tuple[Any, ...]:
    return (type(value), value)


def _float_key(value: float) -> tuple[Any, ...]:
    return (float, value.hex())  # NaN equals itself, -0.0 differs from 0.0


def _sequence_key(value: Any) -> tuple[Any, ...]:
    types = tuple(map(type, value))
    if _PLAIN.issuperset(types):  # (1, 1), [0, -1], ("mean",): one tuple, no per-item keys
        return (type(value), types, tuple(value))
    return (type(value), tuple(map(sample_key, value)))


def _dict_key(value: dict[Any, Any]) -> tuple[Any, ...]:
    return (dict, tuple([(key, sample_key(item)) for key, item in value.items()]))


class _Identity:
    """A value as its own object: equal only to itself, hashed by ``id``, never calling the value's
    ``__hash__`` or ``__eq__``. It holds the value, so the ``id`` cannot be reused while the key lives."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.value is self.value


def _identity_key(value: Any) -> tuple[Any, ...]:
    return (type(value), _Identity(value))


def _opaque_key(value: Any) -> tuple[Any, ...]:
    """The key of a value of no known type: itself where it hashes, its repr where it is unhashable, its
    identity where hashing (or the repr) raises anything else, so a user's broken ``__hash__`` cannot stop
    a profile."""
    try:
        hash(value)
    except TypeError:
        try:
            return (type(value), repr(value))
        except Exception:
            return _identity_key(value)
    except Exception:
        return _identity_key(value)
    return (type(value), value)


_KEYS = {
    _Tensor: _tensor_key,
    torch.nn.Parameter: _tensor_key,
    tuple: _sequence_key,
    list: _sequence_key,
    torch.Size: _sequence_key,
    dict: _dict_key,
    float: _float_key,
    **dict.fromkeys(_PLAIN, _plain_key),
}


def sample_key(value: Any) -> Any:
    """A hashable key that is equal for two values exactly when they are the same sample."""
    keyer = _KEYS.get(type(value))
    if keyer is not None:
        return keyer(value)
    if isinstance(value, _Tensor):
        return _tensor_key(value)
    if isinstance(value, (tuple, list)):
        return _sequence_key(value)
    if isinstance(value, dict):
        return _dict_key(value)
    return _opaque_key(value)


def sample_pair_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The key of one call's ``(args, kwargs)``, its metadata reads unseen by a user's mode or subclass."""
    return unseen(_pair_key, args, kwargs)


def _pair_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return (sample_key(args), sample_key(kwargs))


@functools.lru_cache(maxsize=1024)
def _signature(function: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a text signature
        return None


def call_key(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The key of one call of ``function`` however its arguments were passed.

    A function-object hook sees a call as written (``relu(x)``), a TorchFunctionMode as
    ``handle_torch_function`` passes it on (``relu(x, inplace=False)``): bound to the signature with
    its defaults applied, both give one key. Without a signature (a torch builtin, which both see as
    written), ``(args, kwargs)`` as given.
    """
    try:
        signature = _signature(function)
    except TypeError:  # unhashable
        signature = None
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            pass
        else:
            bound.apply_defaults()
            return ("bound", sample_key(tuple(bound.arguments.items())))
    return (sample_key(args), sample_key(kwargs))


class SampleCollector:
    """Counts calls and keeps one sample per distinct input for the selected functions."""

    def __init__(self, function_names: frozenset[str] | None) -> None:
        self._wanted = function_names
        self._samples: dict[str, dict[Any, list[Any]]] = {}

    def wants(self, function_name: str) -> bool:
        """Whether calls of ``function_name`` are collected."""
        return self._wanted is None or function_name in self._wanted

    def wants_explicitly(self, function_name: str) -> bool:
        """Whether ``function_name`` was named in ``function_names`` (torch-level calls need that)."""
        return self._wanted is not None and function_name in self._wanted

    def observe(self, function_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """Count one call, keep its inputs if new; its index in ``function_data()[function_name]``, or -1."""
        if self._wanted is not None and function_name not in self._wanted:
            return -1
        per_function = self._samples.get(function_name)
        if per_function is None:
            per_function = self._samples[function_name] = {}
        key = sample_pair_key(args, kwargs)
        entry = per_function.get(key)
        if entry is None:
            index = len(per_function)
            per_function[key] = [1, (tuple(args), dict(kwargs)), index]
            return index
        entry[0] += 1
        return entry[2]

    def function_data(self) -> FunctionData:
        """``name -> [(call_count, (args, kwargs)), ...]`` in order of first appearance."""
        return {
            name: [(count, sample) for count, sample, _ in per_function.values()]
            for name, per_function in self._samples.items()
        }
