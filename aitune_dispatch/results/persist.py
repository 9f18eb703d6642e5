"""Save and load a :class:`ProfileResult` as Parquet, readable anywhere without torch or a GPU.

Two layouts, picked by the path given to ``save``:

* **directory** (any path not ending in ``.parquet``)::

      DIR/manifest.json          format, schema_version, source, warnings, metadata, table schemas
      DIR/<table>.parquet        activity, ops, calls, modules, module_calls, kernel_sources, function_data
      DIR/tensors.pt             only with ``with_tensors=True``: torch.save of the sample tensors

* **single file** (``*.parquet``): one Parquet file holding every table. Its columns are a
  ``table`` discriminator plus ``<table>.<column>`` for every column of every table; each table's
  rows sit in their own row groups with the other tables' columns null. The manifest is the file's
  key-value metadata under ``aitune_dispatch.manifest``. With ``with_tensors=True`` the torch.save
  bytes are one row of the ``tensors`` table (column ``tensors.torch_save``; a value is limited to
  2 GiB, use the directory layout for more). One table back by hand, integers kept as integers
  (the other tables' rows make its columns nullable)::

      pd.read_parquet(f, filters=[("table", "==", "activity")], dtype_backend="numpy_nullable").filter(like="activity.")

In both layouts every column carries Arrow field metadata ``unit`` (``ns``, ``us``, ...) and
``sentinel`` (what ``-1`` or null means: ``schema.COLUMN_UNITS``), and string columns are stored
dictionary-encoded (pandas reads them as categoricals); ``load`` restores the in-memory schema.

``calls.sample`` links each functional call to its ``sample_index`` (results saved before that
column existed load with ``sample = -1`` and ``metadata["call_samples"]`` saying so).
``function_data`` is a table of ``function_name, sample_index, count, sample_json``: each sample is
JSON where tensors become :class:`TensorMeta` (shape, dtype, stride, device, layout, element size),
tuples, dicts and non-finite floats are tagged, and other objects keep their repr as
:class:`OpaqueValue`. ``schema.SCHEMA_VERSION`` is in the manifest; a newer version is refused.
A loaded result has no ``module_objects`` (``profiling_df()["module"]`` is None) and, unless loaded
with ``with_tensors=True``, TensorMeta in place of tensors. Saving and loading never import torch
except to write or read ``with_tensors`` data.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import schema
from .profile_result import FunctionData, ProfileResult
from .samples import UNLINKED_KEY, UNLINKED_VALUE, no_sample_column
from .summary import iter_tensor_likes

FORMAT = "aitune_dispatch.ProfileResult"
MANIFEST_FILE = "manifest.json"
MANIFEST_KEY = b"aitune_dispatch.manifest"
TENSORS_FILE = "tensors.pt"
DISCRIMINATOR = "table"
FUNCTION_DATA = "function_data"
TENSORS = "tensors"
FUNCTION_DATA_SCHEMA = pa.schema(
    [
        ("function_name", pa.string()),
        ("sample_index", pa.int64()),
        ("count", pa.int64()),
        ("sample_json", pa.string()),
    ]
)
TENSORS_SCHEMA = pa.schema([("torch_save", pa.large_binary())])
PathLike = str | os.PathLike


class ResultFormatError(ValueError):
    """A path holds no saved result, or one this version cannot read."""


# -- sample values ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorMeta:
    """A saved tensor's metadata, no data: ``numel()`` and ``element_size()`` as a tensor has."""

    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...] | None
    device: str
    layout: str
    itemsize: int

    @classmethod
    def from_tensor(cls, tensor: Any) -> TensorMeta:
        """The metadata of a torch tensor (or a TensorMeta, returned as is)."""
        if isinstance(tensor, TensorMeta):
            return tensor
        try:
            stride: tuple[int, ...] | None = tuple(int(s) for s in tensor.stride())
        except (RuntimeError, NotImplementedError):  # nested / sparse tensors have no strides
            stride = None
        return cls(
            shape=tuple(int(s) for s in tensor.shape),
            dtype=str(tensor.dtype).removeprefix("torch."),
            stride=stride,
            device=str(tensor.device),
            layout=str(tensor.layout).removeprefix("torch."),
            itemsize=int(tensor.element_size()),
        )

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def numel(self) -> int:
        """Number of elements (1 for a scalar)."""
        return math.prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element."""
        return self.itemsize


@dataclass(frozen=True)
class OpaqueValue:
    """A sample value JSON cannot hold (a dtype, a user object): its type name and repr."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


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
    return {"__tensor__": entry}


def encode_value(value: Any, tensors: list[Any] | None = None) -> Any:
    """A JSON-able form of a sample value; tensors are appended to ``tensors`` when it is a list."""
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
    )


def decode_value(value: Any, tensors: list[Any] | None = None) -> Any:
    """The inverse of :func:`encode_value`; tensors come from ``tensors`` when given, else TensorMeta."""
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


# -- tables -----------------------------------------------------------------------------------------
def result_table_names() -> list[str]:
    """The ProfileResult fields declared as Arrow tables, in declaration order."""
    return [f.name for f in fields(ProfileResult) if f.type in ("pa.Table", pa.Table)]


def _result_tables(result: ProfileResult) -> dict[str, pa.Table]:
    values = {f.name: getattr(result, f.name) for f in fields(result)}
    return {name: value for name, value in values.items() if isinstance(value, pa.Table)}


def _function_data_table(function_data: FunctionData, tensors: list[Any] | None) -> pa.Table:
    rows: dict[str, list[Any]] = {name: [] for name in FUNCTION_DATA_SCHEMA.names}
    for name, entries in function_data.items():
        for index, (count, sample) in enumerate(entries):
            rows["function_name"].append(name)
            rows["sample_index"].append(index)
            rows["count"].append(int(count))
            rows["sample_json"].append(json.dumps(encode_value(sample, tensors), allow_nan=False))
    return pa.table(rows, schema=FUNCTION_DATA_SCHEMA)


def _function_data(table: pa.Table, tensors: list[Any] | None) -> FunctionData:
    data: FunctionData = {}
    for name, count, text in zip(*(table[c].to_pylist() for c in ("function_name", "count", "sample_json"))):
        data.setdefault(name, []).append((count, decode_value(json.loads(text), tensors)))
    return data


def _torch_save(tensors: list[Any], destination: Path | io.BytesIO) -> None:
    import torch

    torch.save(tensors, destination)  # one call, so views of one storage share it in the file


def _torch_save_bytes(tensors: list[Any]) -> bytes:
    buffer = io.BytesIO()
    _torch_save(tensors, buffer)
    return buffer.getvalue()


def _torch_load(source: Any, map_location: str | None) -> list[Any]:
    import torch

    return torch.load(source, map_location=map_location, weights_only=True)


def _schema_text(table_schema: pa.Schema) -> str:
    return base64.b64encode(table_schema.serialize().to_pybytes()).decode("ascii")


def _schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def _stored_field(field: pa.Field) -> pa.Field:
    kind = pa.dictionary(pa.int32(), pa.string()) if pa.types.is_string(field.type) else field.type
    return pa.field(field.name, kind, field.nullable, {**(field.metadata or {}), **schema.field_metadata(field.name)})


def _stored(table: pa.Table) -> pa.Table:
    """``table`` as saved: string columns dictionary-encoded, unit and sentinel on every known field."""
    return table.cast(pa.schema([_stored_field(f) for f in table.schema], metadata=table.schema.metadata))


def _restore(table: pa.Table, table_schema: pa.Schema) -> pa.Table:
    return table.cast(table_schema).replace_schema_metadata(table_schema.metadata)


# -- manifest ---------------------------------------------------------------------------------------
def _manifest(result: ProfileResult, tables: dict[str, pa.Table], layout: str, tensors: str | None) -> dict:
    from .. import __version__

    return {
        "format": FORMAT,
        "schema_version": schema.SCHEMA_VERSION,
        "package_version": __version__,
        "layout": layout,
        "source": result.source,
        "dropped_records": int(result.dropped_records),
        "warnings": list(result.warnings),
        "metadata": {str(k): str(v) for k, v in result.metadata.items()},
        "tables": {name: {"rows": t.num_rows, "schema": _schema_text(t.schema)} for name, t in tables.items()},
        "tensors": tensors,
    }


def _check_manifest(manifest: Any, path: Path) -> dict:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ResultFormatError(f"{path} is not a result saved by aitune_dispatch (no {FORMAT} manifest)")
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > schema.SCHEMA_VERSION:
        raise ResultFormatError(
            f"{path} was saved with result schema version {version}, newer than the version this "
            f"aitune_dispatch reads ({schema.SCHEMA_VERSION}); upgrade aitune_dispatch to load it"
        )
    return manifest


def _from_parts(manifest: dict, tables: dict[str, pa.Table], tensors: list[Any] | None) -> ProfileResult:
    # tables and activity columns added later read as documented in results saved before them
    tables = {**{name: schema.empty(table) for name, table in schema.ADDED_TABLES.items()}, **tables}
    if "activity" in tables:
        tables["activity"] = schema.with_added_columns(tables["activity"], "activity", schema.ACTIVITY)
    missing = [name for name in result_table_names() if name not in tables]
    if missing:
        raise ResultFormatError(f"the saved result lacks the tables {missing}; it was not written by save()")
    field_names = {f.name for f in fields(ProfileResult)} - {FUNCTION_DATA, TENSORS}
    metadata = dict(manifest["metadata"])
    if "sample" not in tables["calls"].column_names:  # saved before calls had a sample column
        tables = {**tables, "calls": no_sample_column(tables["calls"])}
        metadata[UNLINKED_KEY] = UNLINKED_VALUE
    return ProfileResult(
        **{name: table for name, table in tables.items() if name in field_names},
        function_data=_function_data(tables[FUNCTION_DATA], tensors),
        source=manifest["source"],
        module_objects=(),
        dropped_records=manifest["dropped_records"],
        warnings=tuple(manifest["warnings"]),
        metadata=metadata,
    )


# -- directory layout -------------------------------------------------------------------------------
def _prepare_directory(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} is a file; save to a new directory or to a path ending in .parquet")
    if directory.is_dir() and any(directory.iterdir()) and not (directory / MANIFEST_FILE).exists():
        raise FileExistsError(
            f"{directory} is a non-empty directory that holds no saved result; pick an empty or new directory"
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST_FILE).unlink(missing_ok=True)  # a crash mid-save leaves no half-valid result
    (directory / TENSORS_FILE).unlink(missing_ok=True)


def _save_directory(result: ProfileResult, directory: Path, tables: dict[str, pa.Table], tensors: list | None) -> None:
    _prepare_directory(directory)
    for name, table in tables.items():
        pq.write_table(_stored(table), directory / f"{name}.parquet")
    if tensors is not None:
        _torch_save(tensors, directory / TENSORS_FILE)
    manifest = _manifest(result, tables, "directory", TENSORS_FILE if tensors is not None else None)
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1))


def _load_directory(directory: Path, with_tensors: bool, map_location: str | None) -> ProfileResult:
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ResultFormatError(f"{directory} is not a result saved by aitune_dispatch (no {MANIFEST_FILE})")
    try:
        manifest = _check_manifest(json.loads(manifest_path.read_text()), directory)
    except json.JSONDecodeError as error:
        raise ResultFormatError(f"{manifest_path} is not valid JSON ({error}); save the result again") from error
    tables = {
        name: _restore(pq.read_table(directory / f"{name}.parquet"), _schema_from_text(entry["schema"]))
        for name, entry in manifest["tables"].items()
    }
    tensors = None
    if with_tensors:
        _require_tensors(manifest, directory)
        tensors = _torch_load(directory / manifest["tensors"], map_location)
    return _from_parts(manifest, tables, tensors)


# -- single-file layout -----------------------------------------------------------------------------
def _union_schema(tables: dict[str, pa.Table]) -> pa.Schema:
    columns = [pa.field(DISCRIMINATOR, pa.string(), nullable=False)]
    for name, table in tables.items():
        columns += [f.with_name(f"{name}.{f.name}").with_nullable(True) for f in table.schema]
    return pa.schema(columns)


def _union_rows(name: str, table: pa.Table, union: pa.Schema) -> pa.Table:
    prefix = f"{name}."
    columns = [pa.repeat(pa.scalar(name), table.num_rows)]
    for union_field in union:
        if union_field.name == DISCRIMINATOR:
            continue
        own = union_field.name.startswith(prefix) and union_field.name[len(prefix) :] in table.column_names
        columns.append(table[union_field.name[len(prefix) :]] if own else pa.nulls(table.num_rows, union_field.type))
    return pa.Table.from_arrays(columns, schema=union)


def _save_file(result: ProfileResult, path: Path, tables: dict[str, pa.Table], tensors: list | None) -> None:
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; pass a file path ending in .parquet or a directory path")
    if tensors is not None:
        tables = {**tables, TENSORS: pa.table({"torch_save": [_torch_save_bytes(tensors)]}, schema=TENSORS_SCHEMA)}
    manifest = _manifest(result, tables, "file", TENSORS if tensors is not None else None)
    stored = {name: _stored(table) for name, table in tables.items()}
    union = _union_schema(stored).with_metadata({MANIFEST_KEY: json.dumps(manifest).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with pq.ParquetWriter(partial, union) as writer:
        for name, table in stored.items():
            if table.num_rows:  # an empty table writes no row group: its schema is in the manifest
                writer.write_table(_union_rows(name, table, union))  # one or more row groups per table
    os.replace(partial, path)  # a crash mid-save leaves the previous file, never half of one


def _read_file_manifest(path: Path) -> dict:
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError) as error:
        raise ResultFormatError(f"{path} is not a Parquet file ({error}); pass a result saved by save()") from error
    text = metadata.get(MANIFEST_KEY)
    return _check_manifest(json.loads(text) if text else None, path)


def _load_file(path: Path, with_tensors: bool, map_location: str | None) -> ProfileResult:
    manifest = _read_file_manifest(path)
    union = pq.read_table(path)
    tables = {}
    for name, entry in manifest["tables"].items():
        table_schema = _schema_from_text(entry["schema"])
        rows = union.filter(pc.equal(union[DISCRIMINATOR], name))
        tables[name] = _restore(
            rows.select([f"{name}.{c}" for c in table_schema.names]).rename_columns(table_schema.names), table_schema
        )
    tensors = None
    if with_tensors:
        _require_tensors(manifest, path)
        tensors = _torch_load(io.BytesIO(tables[TENSORS]["torch_save"][0].as_py()), map_location)
    return _from_parts(manifest, tables, tensors)


def _require_tensors(manifest: dict, path: Path) -> None:
    if not manifest.get("tensors"):
        raise ResultFormatError(
            f"{path} holds tensor metadata only; load it without with_tensors=True, or save the run "
            "again with save(path, with_tensors=True)"
        )


# -- public -----------------------------------------------------------------------------------------
def _is_file_layout(path: Path) -> bool:
    return path.suffix == ".parquet"


def _check_tensors_savable(function_data: FunctionData) -> None:
    for entries in function_data.values():
        for _, sample in entries:
            if any(isinstance(t, TensorMeta) for t in iter_tensor_likes(sample)):
                raise ValueError(
                    "this result holds tensor metadata only (it was loaded without its tensors), so "
                    "with_tensors=True cannot save tensors; save without with_tensors or load it with_tensors=True"
                )


def save_result(result: ProfileResult, path: PathLike, *, with_tensors: bool = False) -> Path:
    """Write ``result`` as Parquet (layouts in the module docstring).

    Parameters
    ----------
    result:
        The result to keep.
    path:
        ``*.parquet``: one file; any other path: a directory (new, empty or a previous save).
    with_tensors:
        Also keep the sample tensors (torch.save); otherwise samples keep tensor metadata only.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    if not isinstance(result, ProfileResult):
        raise TypeError(f"save_result needs a ProfileResult; got {type(result).__name__}")
    target = Path(path)
    if with_tensors:
        _check_tensors_savable(result.function_data)
    tensors: list[Any] | None = [] if with_tensors else None
    tables = _result_tables(result)
    tables[FUNCTION_DATA] = _function_data_table(result.function_data, tensors)
    writer: Callable[..., None] = _save_file if _is_file_layout(target) else _save_directory
    writer(result, target, tables, tensors)
    return target


def load_result(path: PathLike, *, with_tensors: bool = False, map_location: str | None = "cpu") -> ProfileResult:
    """Read a result written by :func:`save_result`, without torch unless ``with_tensors``.

    Parameters
    ----------
    path:
        A ``.parquet`` file or a directory written by ``save``.
    with_tensors:
        Restore the saved sample tensors (needs torch and a save with ``with_tensors=True``).
    map_location:
        Where restored tensors go (``torch.load``'s ``map_location``).

    Returns
    -------
    ProfileResult
        The result, with no ``module_objects`` and, unless ``with_tensors``, TensorMeta in the samples.

    Raises
    ------
    FileNotFoundError, ResultFormatError
        No saved result at ``path``, or one saved by a newer version (the message says which).
    """
    source = Path(path)
    if source.is_dir():
        return _load_directory(source, with_tensors, map_location)
    if source.is_file():
        return _load_file(source, with_tensors, map_location)
    raise FileNotFoundError(
        f"no saved result at {source}: expected a .parquet file or a directory written by ProfileResult.save()"
    )
