"""Replay inputs: the recorded sample made runnable, cloned exactly, and outputs compared.

A loaded result's ``TensorMeta`` becomes a random tensor of the same layout, and every
implementation runs on an exact clone, never on the result's own tensors (``docs/design.md``, "Replay").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ..results import OpaqueValue, TensorMeta

MakeTensor = Callable[[TensorMeta], torch.Tensor]
Inputs = tuple[tuple[Any, ...], dict[str, Any]]
_DEVICE_REPR = re.compile(r"device\(type='(?P<type>[^']+)'(?:, index=(?P<index>\d+))?\)")


class ReplayRefused(Exception):
    """A sample that cannot be replayed faithfully; the message says why and what to do."""


def _span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements of storage a tensor of ``shape`` / ``stride`` reaches (0 when it has no elements)."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def random_tensor(meta: TensorMeta, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random normal tensor with ``meta``'s shape, dtype, strides and device (``generator``: a CPU one).

    :class:`ReplayRefused` for non-strided layouts and integer / bool dtypes, whose values are indices
    or masks (``make_tensor=`` builds them).
    """
    if meta.layout != "strided":
        raise ReplayRefused(
            f"a {meta.layout} tensor cannot be made from its metadata; load the result with_tensors=True"
        )
    dtype = getattr(torch, meta.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ReplayRefused(f"dtype {meta.dtype!r} does not exist in this torch ({torch.__version__})")
    if not (dtype.is_floating_point or dtype.is_complex):
        raise ReplayRefused(
            f"{meta.dtype}{list(meta.shape)} holds indices or a mask whose values matter, and this result keeps "
            "tensor metadata only; pass make_tensor= to build it, or save the result with_tensors=True"
        )
    shape = tuple(meta.shape)
    stride = tuple(meta.stride) if meta.stride is not None else _contiguous(shape)
    values = torch.randn(_span(shape, stride), generator=generator, dtype=torch.float32)
    base = values.to(device=meta.device, dtype=dtype)
    return base.as_strided(shape, stride, 0)


def _opaque_value(value: OpaqueValue) -> Any:
    """The torch value a saved repr stands for (dtype, layout, memory format, device), else refused."""
    if value.type_name in ("torch.dtype", "torch.layout", "torch.memory_format"):
        found = getattr(torch, value.text.removeprefix("torch."), None)
        if found is not None:
            return found
    if value.type_name == "torch.device":
        match = _DEVICE_REPR.fullmatch(value.text)
        if match:
            index = match["index"]
            return torch.device(match["type"], int(index)) if index is not None else torch.device(match["type"])
    raise ReplayRefused(
        f"an argument of type {value.type_name} was saved as its repr {value.text!r} only; "
        "load the result with_tensors=True from a run that kept it, or replay from the live result"
    )


def runnable(value: Any, make_tensor: MakeTensor | None, generator: torch.Generator | None) -> Any:
    """``value`` with every TensorMeta made a tensor (``make_tensor``, else random) and every saved repr its value."""
    if isinstance(value, TensorMeta):
        return make_tensor(value) if make_tensor is not None else random_tensor(value, generator)
    if isinstance(value, OpaqueValue):
        return _opaque_value(value)
    if isinstance(value, tuple):
        return tuple(runnable(item, make_tensor, generator) for item in value)
    if isinstance(value, list):
        return [runnable(item, make_tensor, generator) for item in value]
    if isinstance(value, dict):
        return {key: runnable(item, make_tensor, generator) for key, item in value.items()}
    return value


def _tensors(value: Any, found: dict[int, torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        found[id(value)] = value
    elif isinstance(value, (tuple, list)):
        for item in value:
            _tensors(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, found)


def _dense(tensor: torch.Tensor) -> bool:
    """Whether shape and strides describe the tensor's storage (a nested or sparse one's do not)."""
    return tensor.layout == torch.strided and not tensor.is_nested


def _storage_key(tensor: torch.Tensor) -> tuple[Any, ...] | None:
    if not _dense(tensor) or _span(tuple(tensor.shape), tuple(tensor.stride())) == 0:
        return None
    return (tensor.untyped_storage().data_ptr(), tensor.device, tensor.dtype, tensor.requires_grad)


def _clones(tensors: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """One copy per storage the tensors share, each tensor viewed into it as before (by ``id``)."""
    groups: dict[Any, list[torch.Tensor]] = {}
    copies: dict[int, torch.Tensor] = {}
    for tensor in tensors:
        key = _storage_key(tensor)
        if key is None:
            copies[id(tensor)] = (
                tensor.detach().clone()
                if not _dense(tensor)
                else torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device)
            ).requires_grad_(tensor.requires_grad)
        else:
            groups.setdefault(key, []).append(tensor)
    for members in groups.values():
        low = min(t.storage_offset() for t in members)
        high = max(t.storage_offset() + _span(tuple(t.shape), tuple(t.stride())) for t in members)
        base = members[0].detach().as_strided((high - low,), (1,), low).clone()
        # kernels can depend on requires_grad even under no_grad (matmul folds when the weight needs
        # grad); views made under no_grad inherit it from their base, so the base carries it
        base.requires_grad_(members[0].requires_grad)
        for tensor in members:
            copies[id(tensor)] = base.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset() - low)
    return copies


def _rebuild(value: Any, copies: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return copies[id(value)]
    if isinstance(value, tuple):
        return tuple(_rebuild(item, copies) for item in value)
    if isinstance(value, list):
        return [_rebuild(item, copies) for item in value]
    if isinstance(value, dict):
        return {key: _rebuild(item, copies) for key, item in value.items()}
    return value


def clone_exact(value: Any) -> Any:
    """``value`` (tuples, lists, dicts) with its tensors copied: same layout, ``requires_grad`` and aliasing.

    One tensor passed twice stays one object, and views of one storage stay views of one copy;
    non-tensor values are shared.
    """
    found: dict[int, torch.Tensor] = {}
    _tensors(value, found)
    with torch.no_grad():
        copies = _clones(list(found.values()))
    return _rebuild(value, copies)


def _abs_error(actual: Any, expected: Any) -> float:
    """Largest absolute difference over the tensors of two outputs; NaN where their structures differ."""
    left, left_spec = tree_flatten(actual)
    right, right_spec = tree_flatten(expected)
    if left_spec != right_spec:
        return math.nan
    worst = 0.0
    for a, b in zip(left, right):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return math.nan
        if not isinstance(a, torch.Tensor):
            continue
        if a.shape != b.shape:
            return math.nan
        if a.numel() == 0:
            continue
        wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
        a, b = a.detach().to(wide), b.detach().to(device=a.device, dtype=wide)
        same = torch.isclose(a, b, rtol=0, atol=0, equal_nan=True)  # equal infinities and NaNs differ by 0
        largest = float(torch.where(same, 0.0, (a - b).abs()).max())
        if math.isnan(largest):  # a NaN on one side only
            return math.nan
        worst = max(worst, largest)
    return worst


def compare_outputs(actual: Any, expected: Any) -> tuple[float, str | None]:
    """``(max_abs_error, mismatch)``: NaN where structures or shapes differ; ``assert_close``'s message or None."""
    error = _abs_error(actual, expected)
    try:
        torch.testing.assert_close(actual, expected)
    except (AssertionError, TypeError, ValueError, RuntimeError) as mismatch:
        return error, " ".join(str(mismatch).split()) or type(mismatch).__name__
    return error, None
