"""What the profiler records of a tensor argument: shape, strides, and the parts of a nested tensor.

Duck-typed, so results and reports read recorded values without torch; the tracers and the sample
codec call the same functions, so a shape means one thing everywhere.
"""

from __future__ import annotations

from typing import Any

RAGGED = -1  # a nested tensor's ragged dimension in a recorded shape (its parts differ in that size)


def is_tensor_like(value: Any) -> bool:
    """Whether ``value`` is a tensor or tensor metadata: a ``dtype`` and an ``element_size`` or a ``shape``.

    ``element_size`` is asked first: a strided nested tensor's ``shape`` raises RuntimeError, which
    ``hasattr`` lets through.
    """
    if isinstance(value, type) or not hasattr(value, "dtype"):
        return False
    return hasattr(value, "element_size") or hasattr(value, "shape")


def size_text(size: int) -> str:
    """One size of a recorded shape as text: ``"*"`` for :data:`RAGGED`."""
    return "*" if size == RAGGED else str(size)


def nested_parts(value: Any) -> tuple[tuple[int, ...], ...] | None:
    """The shapes of a nested tensor's (or a ``TensorMeta``'s) parts, or None for any other value.

    A nested tensor has no shape of its own (``.shape`` raises for the strided layout; the jagged one
    holds symbolic sizes), so its parts are what tells two samples apart.
    """
    if getattr(value, "is_nested", False) is True:
        return tuple(tuple(int(size) for size in part.shape) for part in value.unbind())
    parts = getattr(value, "parts", None)
    return parts if isinstance(parts, tuple) else None


def tensor_shape(value: Any) -> tuple[int, ...]:
    """The shape of a tensor or ``TensorMeta`` as ints; a nested one's as :func:`nested_shape` gives it."""
    parts = nested_parts(value)
    return tuple(int(size) for size in value.shape) if parts is None else nested_shape(parts)


def nested_shape(parts: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """``(len(parts), *sizes)``, :data:`RAGGED` where the parts differ, as torch prints a jagged tensor."""
    dims = tuple(sizes[0] if len(set(sizes)) == 1 else RAGGED for sizes in zip(*parts))
    return (len(parts), *dims)


def tensor_strides(value: Any) -> tuple[int, ...] | None:
    """The strides of a tensor or ``TensorMeta``; None for nested and sparse tensors and values without any."""
    if getattr(value, "is_nested", False) is True:
        return None  # the strided layout's stride() raises; the jagged one's holds symbolic sizes
    stride = getattr(value, "stride", None)
    if stride is None:
        return None
    try:
        return tuple(stride() if callable(stride) else stride)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None
