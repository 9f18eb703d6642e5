"""What the profiler records of a tensor argument: shape, strides, and the parts of a nested tensor.

Duck-typed (no torch import), so the results and reports read recorded values without torch; the
tracing backends and the sample codec call the same functions, so a shape means one thing everywhere.
"""

from __future__ import annotations

from typing import Any

RAGGED = -1  # a nested tensor's ragged dimension in a recorded shape (its parts differ in that size)


def is_tensor_like(value: Any) -> bool:
    """Whether ``value`` is a tensor or tensor metadata (duck typing: a ``dtype`` and an ``element_size``
    or a ``shape``).

    ``element_size`` is asked first: a strided nested tensor's ``shape`` raises RuntimeError, which
    ``hasattr`` lets through.
    """
    if isinstance(value, type) or not hasattr(value, "dtype"):
        return False
    return hasattr(value, "element_size") or hasattr(value, "shape")


def size_text(size: int) -> str:
    """One size of a recorded shape as text: ``"*"`` for a nested tensor's :data:`RAGGED` dimension."""
    return "*" if size == RAGGED else str(size)


def nested_parts(value: Any) -> tuple[tuple[int, ...], ...] | None:
    """The shapes of a nested tensor's parts (``unbind()``), or None for any other value.

    Parameters
    ----------
    value:
        A ``torch.Tensor`` (nested in either layout, ``strided`` or ``jagged``), a ``TensorMeta``
        (its ``parts``) or anything else.

    Returns
    -------
    tuple of shapes, or None
        One shape per part; None where ``value`` is not nested. A nested tensor has no shape of its
        own (``.shape`` raises for the strided layout; the jagged one holds symbolic sizes), so its
        parts are what tells two samples apart.
    """
    if getattr(value, "is_nested", False) is True:
        return tuple(tuple(int(size) for size in part.shape) for part in value.unbind())
    parts = getattr(value, "parts", None)
    return parts if isinstance(parts, tuple) else None


def tensor_shape(value: Any) -> tuple[int, ...]:
    """The shape of a tensor (or of saved tensor metadata) as ints; nested tensors too.

    Parameters
    ----------
    value:
        A ``torch.Tensor`` or a ``TensorMeta``.

    Returns
    -------
    tuple[int, ...]
        The sizes. A nested tensor's is ``(number of parts, *sizes of its parts)``, with
        :data:`RAGGED` where its parts differ, as torch prints a jagged tensor (``(2, j1, 3)``).
        The one place that decides what shape a sample's tensor has.
    """
    parts = nested_parts(value)
    return tuple(int(size) for size in value.shape) if parts is None else nested_shape(parts)


def nested_shape(parts: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """A nested tensor's shape from its parts' shapes (:func:`nested_parts`): ``(len(parts), *sizes)``,
    :data:`RAGGED` where the parts differ."""
    dims = tuple(sizes[0] if len(set(sizes)) == 1 else RAGGED for sizes in zip(*parts))
    return (len(parts), *dims)


def tensor_strides(value: Any) -> tuple[int, ...] | None:
    """The strides of a tensor (or of saved tensor metadata), or None where it has none.

    Parameters
    ----------
    value:
        A ``torch.Tensor``, a ``TensorMeta`` or anything with a ``stride`` method or attribute.

    Returns
    -------
    tuple[int, ...] or None
        The strides; None for nested and sparse tensors (they have no strides of ints) and for values
        that record none. The one place that decides what strides a sample's tensor has.
    """
    if getattr(value, "is_nested", False) is True:
        return None  # the strided layout's stride() raises; the jagged one's holds symbolic sizes
    stride = getattr(value, "stride", None)
    if stride is None:
        return None
    try:
        return tuple(stride() if callable(stride) else stride)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None
