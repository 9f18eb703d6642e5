"""The work of one functional call: FLOPs by torch's own formulas and a lower bound on bytes moved.

A sample's tensors (live, or the ``TensorMeta`` of a loaded result) become meta tensors of the same
shapes, strides and dtypes, and the functional call runs on them under a dispatch mode: the aten
ops it dispatches are the ones a real call dispatches for those shapes, their FLOPs come from
``torch.utils.flop_counter``'s registry (what ``FlopCounterMode`` counts, without the Dynamo import
that entering it costs) (matmuls, convolutions, attention), and nothing runs on a
device, so no extra pass or replay is needed. A call none of whose ops has a formula (an
elementwise op, a normalization) has unknown FLOPs (None), never a guess. Bytes are each distinct
input tensor read once plus each output written once: a lower bound, since a kernel can read more
(tiling, recomputation) but never less; a lookup (``GATHERS``: ``embedding``) counts the rows it
gathers instead of its whole table, which it never reads. torch is imported only when work is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..tensors import is_tensor_like
from .values import iter_tensor_likes

# functionals that read only the rows their indices select from one input (its position): their bytes
# count the indices and the rows (as large as the output), not the whole table
GATHERS = {"embedding": 1, "embedding_bag": 1}


@dataclass(frozen=True)
class Work:
    """One call's work.

    Attributes
    ----------
    flops:
        Floating-point operations by torch's formulas; None where no op of the call has one.
    min_bytes:
        Bytes of the inputs read once and the outputs written once: a lower bound.
    dtype:
        The compute dtype: the first floating input's (``"bfloat16"``), else None.
    why:
        Empty, or why the work is unknown (the call failed on meta tensors, no function by that name).
    """

    flops: int | None
    min_bytes: int | None
    dtype: str | None
    why: str = ""


def resolve_function(name: str) -> Callable[..., Any] | None:
    """The callable a recorded function name stands for: ``torch.nn.functional.<name>``, or a
    torch-level API under ``functions="all"`` (``torch.Tensor.add``); None where it does not resolve.
    ``benchmark()`` replays the same callable (``benchmarking.candidates.original_function``)."""
    import torch
    import torch.nn.functional as F

    if not name.startswith("torch."):
        target: Any = getattr(F, name, None)
    else:
        target = torch
        for part in name.split(".")[1:]:
            target = getattr(target, part, None)
            if target is None:
                break
    return target if callable(target) else None


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _as_meta(value: Any) -> Any:
    import torch

    if is_tensor_like(value):
        dtype = value.dtype if isinstance(value.dtype, torch.dtype) else getattr(torch, str(value.dtype))
        shape = tuple(int(s) for s in value.shape)
        stride = getattr(value, "stride", None)
        stride = stride() if callable(stride) else stride
        if stride is None or getattr(value, "layout", torch.strided) not in (torch.strided, "strided"):
            return torch.empty(shape, dtype=dtype, device="meta")
        return torch.empty_strided(shape, tuple(int(s) for s in stride), dtype=dtype, device="meta")
    if isinstance(value, tuple):
        return tuple(_as_meta(item) for item in value)
    if isinstance(value, list):
        return [_as_meta(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_meta(item) for key, item in value.items()}
    return value


def _bytes(tensors: Iterable[Any]) -> int:
    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += int(tensor.numel()) * int(tensor.element_size())  # a tensor's, or a saved TensorMeta's
    return total


def _compute_dtype(tensors: Iterable[Any]) -> str | None:
    for tensor in tensors:
        name = _dtype_name(tensor.dtype)
        if name.startswith(("float", "bfloat", "complex")):
            return name
    return None


def call_work(function_name: str, sample: Any) -> Work:
    """The work of one call of ``function_name`` on ``sample`` (``(args, kwargs)``).

    Parameters
    ----------
    function_name:
        A recorded functional call's name (``"linear"``).
    sample:
        Its ``(args, kwargs)``, with tensors or their saved metadata.

    Returns
    -------
    Work
        ``flops`` None when no op the call dispatches has a FLOP formula; every field None (and
        ``why`` set) when the call cannot be replayed on meta tensors.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry  # torch's formulas; FlopCounterMode would import Dynamo

    args, kwargs = sample if isinstance(sample, (tuple, list)) and len(sample) == 2 else ((sample,), {})
    inputs = list(iter_tensor_likes((args, kwargs)))
    dtype = _compute_dtype(inputs)
    function = resolve_function(function_name)
    if function is None:
        return Work(None, None, dtype, f"no torch function named {function_name!r}")

    class _Counted(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False  # else torch wraps __torch_dispatch__ in torch._disable_dynamo, importing Dynamo

        def __init__(self) -> None:
            super().__init__()
            self.flops: int | None = None

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func.overloadpacket)
            if formula is not None:
                self.flops = (self.flops or 0) + int(formula(*args, **kwargs, out_val=out))
            return out

    try:
        meta_args, meta_kwargs = _as_meta(tuple(args)), _as_meta(dict(kwargs))
        with torch.no_grad(), _Counted() as counted:
            output = function(*meta_args, **meta_kwargs)
    except Exception as error:  # noqa: BLE001 - any function that cannot run on meta has unknown work
        return Work(None, None, dtype, f"{function_name} does not run on meta tensors: {type(error).__name__}")
    outputs = [t for t in iter_tensor_likes(output) if isinstance(t, torch.Tensor)]
    flops = counted.flops
    if function_name in GATHERS and len(args) > GATHERS[function_name]:
        # a lookup reads the rows it gathers, as many bytes as it writes, not its whole table
        table = args[GATHERS[function_name]]
        read = [t for t in inputs if t is not table]
        return Work(flops, _bytes(read) + 2 * _bytes(outputs), _compute_dtype([table]))
    return Work(flops, _bytes(inputs) + _bytes(outputs), dtype)


def sample_work(function_data: Mapping[str, Any]) -> dict[tuple[str, int], Work]:
    """:func:`call_work` of every distinct sample of ``function_data``, keyed ``(name, sample index)``.

    Parameters
    ----------
    function_data:
        ``name -> [(count, (args, kwargs)), ...]``, as ``profile()`` returns it.

    Returns
    -------
    dict
        One :class:`Work` per (function, sample); empty where torch cannot be imported.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        return {}
    return {
        (name, index): call_work(name, sample)
        for name, entries in function_data.items()
        for index, (_, sample) in enumerate(entries)
    }
