"""The sample codec: sample values as strict JSON that keeps their structure, tensors as
:class:`TensorMeta` and other objects as :class:`OpaqueValue`, and ``function_data`` as a table;
pure Python, never importing torch (``docs/design.md``, "Saving")."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .. import schema
from ..schema import FunctionData
from ..tensors import nested_parts, nested_shape, tensor_shape, tensor_strides


@dataclass(frozen=True)
class TensorMeta:
    """A saved tensor's metadata without its data, in the samples of a result loaded without tensors.

    Attributes
    ----------
    shape:
        The tensor's sizes.
    dtype:
        The dtype's name without ``torch.``: ``"float32"``.
    stride:
        In elements; None where the tensor has none (a sparse tensor).
    device:
        ``str(tensor.device)``: ``"cuda:0"``, ``"cpu"``.
    layout:
        Its name without ``torch.``: ``"strided"``.
    itemsize:
        Bytes per element.
    parts:
        A nested tensor's part shapes (``shape`` is then ``(parts, *sizes)``, ``tensors.RAGGED``
        where they differ); None for any other tensor.
    """

    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...] | None
    device: str
    layout: str
    itemsize: int
    parts: tuple[tuple[int, ...], ...] | None = None

    @classmethod
    def from_tensor(cls, tensor: Any) -> TensorMeta:
        """The metadata of a torch tensor (or a TensorMeta, returned as is).

        Parameters
        ----------
        tensor:
            A ``torch.Tensor``, or a TensorMeta.

        Returns
        -------
        TensorMeta
        """
        if isinstance(tensor, TensorMeta):
            return tensor
        strides = tensor_strides(tensor)
        parts = nested_parts(tensor)
        layout = str(tensor.layout).removeprefix("torch.")
        return cls(
            shape=tensor_shape(tensor) if parts is None else nested_shape(parts),  # unbind() once
            dtype=str(tensor.dtype).removeprefix("torch."),
            stride=None if strides is None else tuple(int(s) for s in strides),
            device=str(tensor.device),
            layout="nested" if parts is not None and layout == "strided" else layout,
            itemsize=int(tensor.element_size()),
            parts=parts,
        )

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def numel(self) -> int:
        """Number of elements, as ``torch.Tensor.numel()`` (a nested tensor's summed over its parts).

        Returns
        -------
        int
        """
        if self.parts is not None:
            return sum(math.prod(part) for part in self.parts)
        return math.prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element, as ``torch.Tensor.element_size()``.

        Returns
        -------
        int
        """
        return self.itemsize


@dataclass(frozen=True)
class OpaqueValue:
    """A sample value JSON cannot hold (a dtype, a user object): its type name and repr."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


def iter_tensor_likes(value: Any) -> Iterable[Any]:
    """Every tensor (or tensor metadata) in ``value``, looking inside tuples, lists and dicts."""
    if hasattr(value, "numel") and hasattr(value, "element_size"):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from iter_tensor_likes(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_tensor_likes(item)


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # no tensor can exist unless torch is already imported
    return torch is not None and isinstance(value, torch.Tensor)


def _opaque(value: Any) -> dict[str, Any]:
    if isinstance(value, OpaqueValue):  # a loaded result saved again keeps the original type name
        return {"__repr__": value.text, "type": value.type_name}
    kind = type(value)
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not stop a save
        text = f"<{kind.__qualname__} object>"
    return {"__repr__": text, "type": f"{kind.__module__}.{kind.__qualname__}"}


def _tensor_json(value: Any, tensors: list[Any] | None) -> dict[str, Any]:
    meta = TensorMeta.from_tensor(value)
    index = None
    if tensors is not None and not isinstance(value, TensorMeta):
        index = len(tensors)
        tensors.append(value)
    entry = {
        "shape": list(meta.shape),
        "dtype": meta.dtype,
        "stride": None if meta.stride is None else list(meta.stride),
        "device": meta.device,
        "layout": meta.layout,
        "element_size": meta.itemsize,
        "index": index,
    }
    if meta.parts is not None:
        entry["parts"] = [list(part) for part in meta.parts]
    return {"__tensor__": entry}


def encode_value(value: Any, tensors: list[Any] | None = None) -> Any:
    """A strict-JSON form of a sample value; tensors are appended to ``tensors`` unless it is None."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, TensorMeta) or _is_tensor(value):
        return _tensor_json(value, tensors)
    if isinstance(value, tuple):
        return {"__tuple__": [encode_value(item, tensors) for item in value]}
    if isinstance(value, list):
        return [encode_value(item, tensors) for item in value]
    if isinstance(value, dict):
        return {"__dict__": [[encode_value(k, tensors), encode_value(v, tensors)] for k, v in value.items()]}
    return _opaque(value)


def _decode_tensor(entry: dict[str, Any], tensors: list[Any] | None) -> Any:
    if tensors is not None and entry["index"] is not None:
        return tensors[entry["index"]]
    stride = entry["stride"]
    return TensorMeta(
        shape=tuple(entry["shape"]),
        dtype=entry["dtype"],
        stride=None if stride is None else tuple(stride),
        device=entry["device"],
        layout=entry["layout"],
        itemsize=entry["element_size"],
        parts=None if entry.get("parts") is None else tuple(tuple(part) for part in entry["parts"]),
    )


def decode_value(value: Any, tensors: list[Any] | None = None) -> Any:
    """The inverse of :func:`encode_value`; ``tensors=None`` gives TensorMeta in the tensors' place."""
    if isinstance(value, list):
        return [decode_value(item, tensors) for item in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        return _decode_tensor(value["__tensor__"], tensors)
    if "__tuple__" in value:
        return tuple(decode_value(item, tensors) for item in value["__tuple__"])
    if "__dict__" in value:
        return {decode_value(k, tensors): decode_value(v, tensors) for k, v in value["__dict__"]}
    if "__float__" in value:
        return float(value["__float__"])
    return OpaqueValue(value["type"], value["__repr__"])


def function_data_table(function_data: FunctionData, tensors: list[Any] | None = None) -> pa.Table:
    """``function_data`` as a ``schema.FUNCTION_DATA`` table, one row per distinct sample in order."""
    rows: dict[str, list[Any]] = {name: [] for name in schema.FUNCTION_DATA.names}
    for name, entries in function_data.items():
        for index, (count, sample) in enumerate(entries):
            rows["function_name"].append(name)
            rows["sample_index"].append(index)
            rows["count"].append(int(count))
            rows["sample_json"].append(json.dumps(encode_value(sample, tensors), allow_nan=False))
    return pa.table(rows, schema=schema.FUNCTION_DATA)


def function_data_from_table(table: pa.Table, tensors: list[Any] | None = None) -> FunctionData:
    """The inverse of :func:`function_data_table`."""
    data: FunctionData = {}
    for name, count, text in zip(*(table[c].to_pylist() for c in ("function_name", "count", "sample_json"))):
        data.setdefault(name, []).append((count, decode_value(json.loads(text), tensors)))
    return data


def check_tensors_savable(function_data: FunctionData) -> None:
    """Raise ValueError when the samples hold TensorMeta, so ``with_tensors=True`` has nothing to save."""
    for entries in function_data.values():
        for _, sample in entries:
            if any(isinstance(t, TensorMeta) for t in iter_tensor_likes(sample)):
                raise ValueError(
                    "this result holds tensor metadata only (it was loaded without its tensors), so "
                    "with_tensors=True cannot save tensors; save without with_tensors or load it with_tensors=True"
                )
