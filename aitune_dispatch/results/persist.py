"""Saving and loading a result as Parquet tables and a manifest, readable without torch or a GPU.

:func:`save_result` writes a directory or one ``*.parquet`` file atomically; :func:`load_result`,
the one load, refuses a save that lacks a table or column and merges a directory of per-rank results. It takes
the result's class because this module sits below ``ProfileResult`` (``docs/design.md``, "Saving").
One table of a ``*.parquet`` file read back by hand, integers kept as integers::

      pd.read_parquet(f, filters=[("table", "==", "calls")], dtype_backend="numpy_nullable").filter(regex="^calls[.]")
"""

from __future__ import annotations

import base64
import errno
import functools
import io
import json
import os
import pickle
import re
import shutil
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import encoded, schema
from . import atomic
from .values import (
    OpaqueValue,
    TensorMeta,
    check_tensors_savable,
    decode_value,
    encode_value,
    function_data_from_table,
    function_data_table,
)
from .views.accounting import is_result
from .views.ranks import RankedResult, Result, merge

__all__ = [
    "FORMAT",
    "MANIFEST_KEY",
    "OpaqueValue",
    "ResultFormatError",
    "Stored",
    "TensorMeta",
    "TensorsNotSavedError",
    "decode_value",
    "encode_value",
    "format_error",
    "load_result",
    "rank_result_paths",
    "read",
    "save_result",
    "write",
]

FORMAT = "aitune_dispatch.ProfileResult"
MANIFEST_FILE = "manifest.json"
MANIFEST_KEY = b"aitune_dispatch.manifest"
TENSORS_FILE = "tensors.pt"
DISCRIMINATOR = "table"
TENSORS = "tensors"
PathLike = str | os.PathLike


class ResultFormatError(ValueError):
    """A path holds no saved result, a damaged or foreign one, or one this version cannot read.

    A ValueError, as load's errors were before it existed. :func:`format_error` builds the ones for
    damaged and foreign files.

    Attributes
    ----------
    args:
        ``(message,)``: the file, what is wrong with it, and what to do.
    """


class TensorsNotSavedError(ResultFormatError):
    """``with_tensors=True`` asked for tensors from a result saved with tensor metadata only."""


def format_error(path: Path, problem: str) -> ResultFormatError:
    """The error for a damaged or foreign result; ``problem`` is a predicate of ``path`` ("is missing")."""
    return ResultFormatError(
        f"{path} {problem}. It is damaged (a save or a copy that did not finish?) or was not written by "
        "aitune_dispatch: save the result again, or load a path that ProfileResult.save() wrote"
    )


@dataclass(frozen=True)
class Stored:
    """What is kept: tables by name in saving order, the manifest's JSON facts (:func:`read` returns
    the whole manifest there), and the sample tensors or None."""

    tables: dict[str, pa.Table]
    facts: dict[str, Any] = field(default_factory=dict)
    tensors: list[Any] | None = None


# -- writing and reading files ------------------------------------------------------------------------
# A save touches the disk only through _create, _torch_save and _free_bytes (tests give it a full disk there).
def _create(path: Path) -> BinaryIO:
    """A new file to write, through Python so that the OS error comes back as is."""
    return open(path, "xb")  # noqa: SIM115 (closed by _write)


def _torch_save(tensors: list[Any], destination: Path | io.BytesIO) -> None:
    import torch

    torch.save(tensors, destination)  # one call, so views of one storage share it in the file


def _free_bytes(directory: Path) -> int:
    return shutil.disk_usage(directory).free


def _write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Create ``path`` and fill it with ``write``; an OS error names the file."""
    try:
        with _create(path) as sink:
            write(sink)
    except OSError as error:
        if error.filename is None and error.errno is not None:
            raise OSError(error.errno, error.strerror or str(error), str(path)) from error
        raise


def _write_tensors(tensors: list[Any], path: Path) -> None:
    """``torch.save`` into ``path`` by name (``docs/design.md``, "Saving")."""
    try:
        _torch_save(tensors, path)
    except RuntimeError as error:
        # torch writes the file itself and reports a short write as "unexpected pos", not as the OS's error
        if _free_bytes(path.parent) < sum(getattr(t, "nbytes", 0) for t in tensors):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from error
        raise


def _torch_save_bytes(tensors: list[Any]) -> bytes:
    buffer = io.BytesIO()
    _torch_save(tensors, buffer)
    return buffer.getvalue()


def _torch_load(source: Any, map_location: str | None) -> list[Any]:
    import torch

    return torch.load(source, map_location=map_location, weights_only=True)


def _load_tensors(source: Path | io.BytesIO, path: Path, map_location: str | None) -> list[Any]:
    """The saved tensors; a missing, truncated or foreign tensors file is a ResultFormatError naming ``path``."""
    try:
        if isinstance(source, io.BytesIO):
            head = source.getvalue()[:4]
        else:
            with source.open("rb") as file:
                head = file.read(4)
    except FileNotFoundError as error:
        raise format_error(path, "is missing, though the manifest says tensors were saved") from error
    if head != b"PK\x03\x04":  # what torch.save writes is a zip archive
        raise format_error(path, "holds saved tensors that cannot be read (not a torch.save archive)")
    try:
        tensors = _torch_load(source, map_location)
    except (EOFError, KeyError, struct.error, pickle.UnpicklingError) as error:
        raise format_error(
            path, f"holds saved tensors that cannot be read ({type(error).__name__}: {error})"
        ) from error
    except RuntimeError as error:
        if "PytorchStreamReader" not in str(error):  # not the file (a map_location without that device, say)
            raise
        raise format_error(path, f"holds saved tensors that cannot be read ({error})") from error
    if not isinstance(tensors, list):
        raise format_error(path, f"holds saved tensors that are a {type(tensors).__name__}, not a list of tensors")
    return tensors


# -- tables -----------------------------------------------------------------------------------------
def _schema_text(table_schema: pa.Schema) -> str:
    """The manifest's record of a table's schema: string columns named ``string``, whatever their encoding.

    The Parquet columns are dictionary-encoded either way; the manifest names the logical type, as
    results saved before strings were dictionary-encoded in memory did, so that those versions
    read what this one writes as they read their own results.
    """
    logical = encoded.decoded(table_schema.empty_table()).schema
    return base64.b64encode(logical.serialize().to_pybytes()).decode("ascii")


def _schema_from_text(text: str, name: str, manifest_path: Path) -> pa.Schema:
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))
    except (ValueError, pa.ArrowException) as error:  # binascii.Error and ArrowInvalid are ValueErrors
        raise format_error(
            manifest_path, f"has a schema for table {name!r} that is not an Arrow schema ({error})"
        ) from error


def _stored_field(field: pa.Field) -> pa.Field:
    kind = pa.dictionary(pa.int32(), pa.string()) if pa.types.is_string(field.type) else field.type
    return pa.field(field.name, kind, field.nullable, {**(field.metadata or {}), **schema.field_metadata(field.name)})


def _stored(table: pa.Table) -> pa.Table:
    """``table`` as saved: string columns dictionary-encoded, unit and sentinel on every known field."""
    return table.cast(pa.schema([_stored_field(f) for f in table.schema], metadata=table.schema.metadata))


def _in_memory(table_schema: pa.Schema) -> pa.Schema:
    """A saved table's schema as it is held in memory: its string columns dictionary-encoded (schema.STRING)."""
    fields = [f.with_type(schema.STRING) if pa.types.is_string(f.type) else f for f in table_schema]
    return pa.schema(fields, metadata=table_schema.metadata)


def _restore(table: pa.Table, table_schema: pa.Schema, name: str, rows: int, path: Path) -> pa.Table:
    """The table read back in its saved schema, string columns brought to one dictionary each.

    A table whose columns or rows differ from the manifest's is a ResultFormatError naming ``path``.
    """
    target = _in_memory(table_schema)
    try:
        restored = encoded.encoded(table.cast(target).replace_schema_metadata(target.metadata))
    except (ValueError, TypeError, NotImplementedError, pa.ArrowException) as error:
        raise format_error(
            path, f"does not have the columns its manifest records for table {name!r} ({error})"
        ) from error
    if restored.num_rows != rows:
        raise format_error(path, f"holds {restored.num_rows} rows of table {name!r}, its manifest records {rows}")
    return restored


# -- manifest ---------------------------------------------------------------------------------------
def _manifest(stored: Stored, tables: dict[str, pa.Table], layout: str, tensors: str | None) -> dict:
    return {
        "format": FORMAT,
        "schema_version": schema.SCHEMA_VERSION,
        "package_version": schema.PACKAGE_VERSION,
        "layout": layout,
        **stored.facts,
        "tables": {name: {"rows": t.num_rows, "schema": _schema_text(t.schema)} for name, t in tables.items()},
        "tensors": tensors,
    }


def _parse_manifest(text: bytes, path: Path) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise format_error(path, f"has a manifest that is not valid JSON ({error})") from error


def _is_plain_name(name: Any) -> bool:
    """A file name without folders, so that a manifest names files inside its own result only."""
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name and "\\" not in name


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_manifest(manifest: Any, path: Path) -> dict:
    """``manifest`` when it is one this version reads: its format, version, tables and tensors entry checked."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ResultFormatError(
            f"{path} is not a result saved by aitune_dispatch (no {FORMAT} manifest); pass a path that "
            "ProfileResult.save() wrote"
        )
    version = manifest.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise format_error(path, f"has a manifest whose schema_version is {version!r}, not an integer")
    if version > schema.SCHEMA_VERSION:
        raise ResultFormatError(
            f"{path} was saved with result schema version {version}, newer than the version this "
            f"aitune_dispatch reads ({schema.SCHEMA_VERSION}); upgrade aitune_dispatch to load it"
        )
    tables = manifest.get("tables")
    if not isinstance(tables, dict):
        raise format_error(path, "has a manifest without 'tables' (a mapping of table name to its rows and schema)")
    for name, entry in tables.items():
        if not (
            _is_plain_name(name)
            and isinstance(entry, dict)
            and _is_count(entry.get("rows"))
            and isinstance(entry.get("schema"), str)
        ):
            raise format_error(
                path, f"has a manifest whose entry for table {name!r} is not {{'rows': n, 'schema': text}}"
            )
    if manifest.get("tensors") is not None and not _is_plain_name(manifest["tensors"]):
        raise format_error(path, f"has a manifest whose 'tensors' is {manifest['tensors']!r}, not a file name or null")
    return manifest


def _require_tensors(manifest: dict, path: Path) -> None:
    if not manifest.get("tensors"):
        raise TensorsNotSavedError(
            f"{path} holds tensor metadata only; load it without with_tensors=True, or save the run "
            "again with save(path, with_tensors=True)"
        )


# -- directory layout -------------------------------------------------------------------------------
def _check_directory(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} is a file; save to a new directory or to a path ending in .parquet")
    if (
        directory.is_dir()
        and any(not atomic.is_staging(p.name) for p in directory.iterdir())
        and not (directory / MANIFEST_FILE).exists()
    ):
        raise FileExistsError(
            f"{directory} is a non-empty directory that holds no saved result; pick an empty or new directory"
        )


def _owned(directory: Path, stored: Stored) -> set[str]:
    """The entries of ``directory`` a save into it replaces: its result's files and the ones it writes."""
    owned = {MANIFEST_FILE, TENSORS_FILE, *(f"{name}.parquet" for name in stored.tables)}
    try:
        previous = json.loads((directory / MANIFEST_FILE).read_bytes()).get("tables", {})
        owned.update(f"{name}.parquet" for name in previous if _is_plain_name(name))
    except (OSError, ValueError, AttributeError):  # none, or not one save() wrote: its own tables only
        pass
    return owned


def _save_directory(stored: Stored, directory: Path) -> None:
    manifest = _manifest(stored, stored.tables, "directory", TENSORS_FILE if stored.tensors is not None else None)
    text = json.dumps(manifest, indent=1).replace("\n", os.linesep)  # as Path.write_text wrote it
    with atomic.replacing_directory(directory, _owned(directory, stored), MANIFEST_FILE) as staging:
        for name, table in stored.tables.items():
            _write(staging / f"{name}.parquet", functools.partial(pq.write_table, _stored(table)))
        if stored.tensors is not None:
            _write_tensors(stored.tensors, staging / TENSORS_FILE)
        _write(staging / MANIFEST_FILE, lambda sink: sink.write(text.encode()))


def _read_table(directory: Path, name: str, entry: dict) -> pa.Table:
    path = directory / f"{name}.parquet"
    table_schema = _schema_from_text(entry["schema"], name, directory / MANIFEST_FILE)
    try:
        table = pq.read_table(path)
    except FileNotFoundError as error:
        raise format_error(path, f"is missing, though the manifest lists the table {name!r}") from error
    except PermissionError:
        raise
    except (OSError, pa.ArrowException) as error:
        raise format_error(path, f"is not a readable Parquet file, or a truncated one ({error})") from error
    return _restore(table, table_schema, name, entry["rows"], path)


def _load_directory(directory: Path, with_tensors: bool, map_location: str | None) -> Stored:
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ResultFormatError(f"{directory} is not a result saved by aitune_dispatch (no {MANIFEST_FILE})")
    manifest = _check_manifest(_parse_manifest(manifest_path.read_bytes(), manifest_path), manifest_path)
    tables = {name: _read_table(directory, name, entry) for name, entry in manifest["tables"].items()}
    tensors = None
    if with_tensors:
        _require_tensors(manifest, directory)
        tensors_file = directory / manifest["tensors"]
        tensors = _load_tensors(tensors_file, tensors_file, map_location)
    return Stored(tables, manifest, tensors)


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


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; pass a file path ending in .parquet or a directory path")


def _save_file(stored: Stored, path: Path) -> None:
    tables = stored.tables
    if stored.tensors is not None:
        blob = pa.table({"torch_save": [_torch_save_bytes(stored.tensors)]}, schema=schema.TENSORS)
        tables = {**tables, TENSORS: blob}
    manifest = _manifest(stored, tables, "file", TENSORS if stored.tensors is not None else None)
    encoded = {name: _stored(table) for name, table in tables.items()}
    union = _union_schema(encoded).with_metadata({MANIFEST_KEY: json.dumps(manifest).encode()})

    def write(sink: BinaryIO) -> None:
        with pq.ParquetWriter(sink, union) as writer:
            for name, table in encoded.items():
                if table.num_rows:  # an empty table writes no row group: its schema is in the manifest
                    writer.write_table(_union_rows(name, table, union))  # one or more row groups per table

    with atomic.replacing_file(path) as staging:
        _write(staging, write)


def _read_file_manifest(path: Path) -> dict:
    try:
        metadata = pq.read_schema(path).metadata or {}
    except PermissionError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise format_error(path, f"is not a Parquet file, or a truncated one ({error})") from error
    text = metadata.get(MANIFEST_KEY)
    return _check_manifest(_parse_manifest(text, path) if text else None, path)


def _file_table(union: pa.Table, name: str, entry: dict, path: Path) -> pa.Table:
    """Table ``name`` of the single-file layout: its rows, its ``<name>.*`` columns under their own names."""
    table_schema = _schema_from_text(entry["schema"], name, path)
    columns = [f"{name}.{c}" for c in table_schema.names]
    missing = [c for c in [DISCRIMINATOR, *columns] if c not in union.column_names]
    if missing:
        raise format_error(path, f"lacks the columns {missing} of table {name!r}")
    try:
        rows = union.filter(pc.equal(union[DISCRIMINATOR], name))
    except (ValueError, TypeError, NotImplementedError, pa.ArrowException) as error:
        raise format_error(path, f"has a {DISCRIMINATOR!r} column that does not hold table names ({error})") from error
    return _restore(rows.select(columns).rename_columns(table_schema.names), table_schema, name, entry["rows"], path)


def _load_file(path: Path, with_tensors: bool, map_location: str | None) -> Stored:
    manifest = _read_file_manifest(path)
    try:
        union = pq.read_table(path)
    except PermissionError:
        raise
    except (OSError, pa.ArrowException) as error:
        raise format_error(path, f"has tables that cannot be read ({error})") from error
    tables = {name: _file_table(union, name, entry, path) for name, entry in manifest["tables"].items()}
    tensors = None
    if with_tensors:
        _require_tensors(manifest, path)
        blob = tables.get(TENSORS)
        if blob is None or blob.num_rows != 1 or "torch_save" not in blob.column_names:
            raise format_error(path, f"has no {TENSORS!r} table row, though its manifest says tensors were saved")
        tensors = _load_tensors(io.BytesIO(blob["torch_save"][0].as_py() or b""), path, map_location)
    return Stored({name: table for name, table in tables.items() if name != TENSORS}, manifest, tensors)


# -- public -----------------------------------------------------------------------------------------
def _is_file_layout(path: Path) -> bool:
    return path.suffix == ".parquet"


def _kept(target: Path, error: OSError, existed: bool) -> str:
    """What a failed save left, in words that hold whatever failed (an undo that failed too: ``atomic.Stranded``)."""
    if not isinstance(error, atomic.Stranded):
        return f"the previous result at {target} is unchanged" if existed else "nothing of it was left behind"
    if error.previous is None:
        return (
            f"the previous result at {target} was partly replaced and no longer loads (your own files there are "
            "untouched): save elsewhere, or move your files out and delete its *.parquet files to save there again"
        )
    if atomic.is_staging(error.previous.name):
        kept = f"the previous result is at {error.previous}, no longer at {target}: rename it back"
    else:
        kept = f"the previous result at {target} is unchanged"
    if not error.entries:
        return kept
    return (
        f"{kept}, but files of yours that were in it could not be moved back: {', '.join(sorted(error.entries))} "
        f"are in {error.holder}; move them back into {target} by hand"
    )


def _save_failed(target: Path, error: OSError, existed: bool) -> OSError:
    """The error a failed save raises: the cause in words, the file it was writing, and what was kept."""
    cause = os.strerror(error.errno) if error.errno else str(error)
    name = Path(error.filename).name if error.filename else ""
    where = f" while writing {name}" if name and not atomic.is_staging(name) else ""
    kept = _kept(target, error, existed)
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "Free some space there (or save to another disk) and save again"
    else:
        fix = "Fix that (or save somewhere else) and save again"
    message = f"could not save the result to {target}: {cause}{where}; {kept}. {fix}"
    return OSError(error.errno, message) if error.errno else OSError(message)


def write(stored: Stored, path: PathLike) -> Path:
    """Write ``stored`` beside ``path`` and put it there when complete (``docs/design.md``, "Saving").

    Parameters
    ----------
    stored:
        The tables, manifest facts and optional tensors.
    path:
        ``*.parquet``: one file; any other path: a directory (new, empty or a previous save). A
        symlink is followed: what it names is replaced, the link kept.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    OSError
        The disk refused, ``errno`` as the OS gave it; the message says what was kept: the previous
        result unchanged or, where the failure could not be undone (``atomic.Stranded``), where it
        and any files of the user's carried with it are now.
    """
    target = Path(path)
    check, writer = (_check_file, _save_file) if _is_file_layout(target) else (_check_directory, _save_directory)
    check(target)  # a path that holds something else: refused before anything is written
    existed = target.exists()
    try:
        writer(stored, target)
    except OSError as error:
        raise _save_failed(target, error, existed) from error
    return target


def read(path: PathLike, *, with_tensors: bool = False, map_location: str | None = "cpu") -> Stored:
    """Read what :func:`write` wrote, without torch unless ``with_tensors``.

    Parameters
    ----------
    path:
        A ``.parquet`` file or a directory written by :func:`write`.
    with_tensors:
        Also read the saved sample tensors (needs torch and a save that kept them).
    map_location:
        Where restored tensors go (``torch.load``'s ``map_location``).

    Returns
    -------
    Stored
        The tables in their in-memory schemas, the whole manifest as ``facts``, and the tensors.

    Raises
    ------
    FileNotFoundError, ResultFormatError
        Nothing saved at ``path``; a damaged or foreign file, or one saved by a newer version;
        ``TensorsNotSavedError``: ``with_tensors`` for a save without tensors.
    """
    source = Path(path)
    if source.is_dir():
        return _load_directory(source, with_tensors, map_location)
    if source.is_file():
        return _load_file(source, with_tensors, map_location)
    raise FileNotFoundError(
        f"no saved result at {source}: expected a .parquet file or a directory written by ProfileResult.save()"
    )


# -- a result as tables and a manifest, and back --------------------------------------------------------
def _result_tables(result: RankedResult) -> dict[str, pa.Table]:
    """The result's tables by name (``schema.RESULT_TABLES``), in saving order."""
    return {name: getattr(result, name) for name in schema.RESULT_TABLES}


def _result_stored(result: RankedResult, with_tensors: bool) -> Stored:
    if with_tensors:
        check_tensors_savable(result.function_data)
    tensors: list[Any] | None = [] if with_tensors else None
    tables = _result_tables(result)
    tables[schema.FUNCTION_DATA_TABLE] = function_data_table(result.function_data, tensors)
    facts = {
        "source": result.source,
        "dropped_records": int(result.dropped_records),
        "warnings": list(result.warnings),
        "metadata": {str(k): str(v) for k, v in result.metadata.items()},
    }
    return Stored(tables, facts, tensors)


# the facts a manifest keeps of a result, and what each must be
_FACTS: dict[str, type] = {"source": str, "dropped_records": int, "warnings": list, "metadata": dict}


def _check_facts(manifest: Mapping[str, Any], path: Path) -> None:
    for name, kind in _FACTS.items():
        value = manifest.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise format_error(path, f"has a manifest whose {name!r} is {value!r}, not a {kind.__name__}")


def _check_columns(tables: Mapping[str, pa.Table], path: Path) -> None:
    """Each result table has every column of its schema (``schema.ACTIVITY`` and so on), or a ResultFormatError."""
    for name in schema.RESULT_TABLES:
        table_schema: pa.Schema = getattr(schema, name.upper())
        missing = [column for column in table_schema.names if column not in tables[name].column_names]
        if missing:
            raise format_error(path, f"lacks the columns {missing} of table {name!r}")


def _from_stored(result_type: type[Result], stored: Stored, path: Path) -> Result:
    tables = dict(stored.tables)
    manifest = stored.facts
    missing = [name for name in (*schema.RESULT_TABLES, schema.FUNCTION_DATA_TABLE) if name not in tables]
    if missing:
        raise format_error(path, f"lacks the tables {missing}")
    _check_columns(tables, path)
    _check_facts(manifest, path)
    try:
        function_data = function_data_from_table(tables[schema.FUNCTION_DATA_TABLE], stored.tensors)
    except (ValueError, TypeError, KeyError, IndexError) as error:  # JSONDecodeError is a ValueError
        raise format_error(path, f"holds samples (table function_data) that cannot be decoded ({error!r})") from error
    return result_type(
        **{name: tables[name] for name in schema.RESULT_TABLES},
        function_data=function_data,
        source=manifest["source"],
        module_objects=(),
        dropped_records=manifest["dropped_records"],
        warnings=tuple(manifest["warnings"]),
        metadata=dict(manifest["metadata"]),
    )


def save_result(result: RankedResult, path: PathLike, *, with_tensors: bool = False) -> Path:
    """Write ``result`` as Parquet; ``ProfileResult.save`` is this.

    Parameters
    ----------
    result:
        The result to keep (a ``ProfileResult``).
    path:
        ``*.parquet``: one file; any other path: a directory (new, empty or a previous save).
    with_tensors:
        Also keep the sample tensors; otherwise samples keep tensor metadata only.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    if not is_result(result):
        raise TypeError(f"save_result needs a ProfileResult; got {type(result).__name__}")
    return write(_result_stored(result, with_tensors), path)


def load_result(
    result_type: type[Result], path: PathLike, *, with_tensors: bool = False, map_location: str | None = "cpu"
) -> Result:
    """The one load: a saved result, or a directory of saved per-rank results as their merge.

    Parameters
    ----------
    result_type:
        The class to build (``ProfileResult``; its ``load`` passes itself).
    path:
        What :func:`save_result` wrote, or a directory of per-rank saves (:func:`rank_result_paths`).
    with_tensors:
        Restore the saved sample tensors (needs torch and a save with ``with_tensors=True``).
    map_location:
        Where restored tensors go (``torch.load``'s ``map_location``).

    Returns
    -------
    ProfileResult
        With no ``module_objects`` and, unless ``with_tensors``, TensorMeta in the samples.

    Raises
    ------
    FileNotFoundError, ResultFormatError
        No saved result at ``path`` nor inside it; a damaged or foreign one, or a newer version's.
    """
    folder = Path(path)
    if folder.is_dir() and not (folder / MANIFEST_FILE).exists():
        parts = rank_result_paths(folder)
        if not parts:
            raise ResultFormatError(
                f"{folder} is not a result saved by aitune_dispatch (no {MANIFEST_FILE}) and holds no "
                "per-rank results (sub-folders or .parquet files written by ProfileResult.save()); pass what "
                "save() wrote"
            )
        return merge([_load_one(result_type, part, with_tensors, map_location) for part in parts])
    return _load_one(result_type, path, with_tensors, map_location)


def _load_one(result_type: type[Result], path: PathLike, with_tensors: bool, map_location: str | None) -> Result:
    return _from_stored(result_type, read(path, with_tensors=with_tensors, map_location=map_location), Path(path))


# -- a directory of per-rank results -------------------------------------------------------------------------
def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def rank_result_paths(directory: str | Path) -> list[Path]:
    """The saved results directly inside ``directory``: folders holding a manifest, saved ``*.parquet`` files.

    Parameters
    ----------
    directory:
        A folder into which each rank saved its result (``result.save(f"{directory}/rank{rank}")``).

    Returns
    -------
    list[pathlib.Path]
        In natural name order (``rank2`` before ``rank10``); empty when it holds none or is no folder.
    """
    folder = Path(directory)
    if not folder.is_dir():
        return []
    entries = [p for p in folder.iterdir() if not atomic.is_staging(p.name)]  # a killed save's copy is no rank
    found = [p for p in entries if (p / MANIFEST_FILE).is_file() or _is_saved_file(p)]
    return sorted(found, key=_natural)


def _is_saved_file(path: Path) -> bool:
    """A ``.parquet`` file that ``save`` wrote (its schema metadata holds the manifest)."""
    if path.suffix != ".parquet" or not path.is_file():
        return False
    try:
        return MANIFEST_KEY in (pq.read_schema(path).metadata or {})
    except (pa.ArrowInvalid, OSError):
        return False
