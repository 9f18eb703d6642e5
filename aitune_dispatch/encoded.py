"""Dictionary-encoded string columns (``schema.STRING``): built, normalised, tested and decoded without per-row work.

The helpers keep three rules true: a column's dictionary holds each value once, a column has one
chunk, a missing value is a null code. Tests and maps run on the distinct values and reach the rows
by code; :func:`objects` is the way to NumPy; why and pyarrow's traps: ``docs/design.md``, "Strings
in memory".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# = schema.STRING: the modules below every stage import nothing of the package, not even each other
STRING = pa.dictionary(pa.int32(), pa.string())

__all__ = [
    "STRING",
    "constant",
    "decoded",
    "encoded",
    "from_codes",
    "is_encoded",
    "map_values",
    "matches",
    "objects",
    "of_values",
    "plain",
]

Column: TypeAlias = pa.Array | pa.ChunkedArray


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _is_text_dictionary(kind: pa.DataType) -> bool:
    return pa.types.is_dictionary(kind) and _is_text(kind.value_type)


def _array(column: Column) -> pa.Array:
    """One array of the column's values (chunks combined under one unified dictionary)."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _unique(array: pa.DictionaryArray) -> pa.DictionaryArray:
    """``array`` of type :data:`STRING` whose dictionary holds each value once."""
    if array.type != STRING:
        array = array.cast(STRING)
    values = array.dictionary
    if pc.count_distinct(values, mode="all").as_py() == len(values):
        return array
    once = pc.dictionary_encode(values)
    return pa.DictionaryArray.from_arrays(pc.take(once.indices, array.indices), once.dictionary)


def from_codes(codes: np.ndarray | pa.Array, values: Sequence[str | None] | pa.Array) -> pa.DictionaryArray:
    """A :data:`STRING` array of ``values[codes[i]]`` (null code: null row), each distinct value kept once."""
    indices = codes if isinstance(codes, pa.Array) else pa.array(np.asarray(codes, np.int32), pa.int32())
    dictionary = values if isinstance(values, pa.Array) else pa.array(list(values), pa.string())
    return _unique(pa.DictionaryArray.from_arrays(indices.cast(pa.int32()), dictionary.cast(pa.string())))


def constant(value: str | None, count: int) -> pa.DictionaryArray:
    """``count`` rows of ``value`` (null rows for None) as a :data:`STRING` array holding it once."""
    if value is None:
        return pa.nulls(count, STRING)
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, np.int32)), pa.array([value], pa.string()))


def of_values(values: Iterable[str | None] | np.ndarray) -> pa.DictionaryArray:
    """Python strings (None: null) as a :data:`STRING` array; read one by one, each distinct value kept once."""
    items = values if isinstance(values, np.ndarray) else list(values)
    return pa.array(items, STRING)


def is_encoded(column: Column) -> bool:
    """Whether ``column`` already follows the module's rules (type :data:`STRING`, one chunk, unique values)."""
    if column.type != STRING:
        return False
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks > 1:
            return False
        if column.num_chunks == 0:
            return True
        column = column.chunk(0)
    values = column.dictionary
    return bool(pc.count_distinct(values, mode="all").as_py() == len(values))


def _encoded_column(column: Column) -> pa.Array:
    array = _array(column)
    if _is_text(array.type):
        array = pc.dictionary_encode(array.cast(pa.string()))
    return _unique(array)


def encoded(table: pa.Table) -> pa.Table:
    """``table`` with every string column (plain, several dictionaries, other index types) made a :data:`STRING`
    column that follows the rules; columns already encoded are kept without a copy."""
    for index, field in enumerate(table.schema):
        if not (_is_text(field.type) or _is_text_dictionary(field.type)):
            continue
        column = table.column(index)
        if is_encoded(column):
            continue
        table = table.set_column(index, field.with_type(STRING), _encoded_column(column))
    return table


# a decoded chunk's buffer grows by doubling: one chunk per column would briefly need twice its size
DECODE_ROWS = 1 << 16


def plain(column: Column, kind: pa.DataType | None = None) -> pa.ChunkedArray:
    """Every row's string of a dictionary column as ``kind`` (None: ``pa.string()``), in :data:`DECODE_ROWS` chunks."""
    kind = kind or pa.string()
    array = _array(column)
    if not pa.types.is_dictionary(array.type):
        return pa.chunked_array([array.cast(kind)])
    values = array.dictionary.cast(kind)
    indices = array.indices
    parts = [values.take(indices.slice(start, DECODE_ROWS)) for start in range(0, len(indices), DECODE_ROWS)]
    return pa.chunked_array(parts, kind)


def decoded(table: pa.Table) -> pa.Table:
    """``table`` with plain string columns: its ``to_pandas()`` is what plain strings give, no Categorical."""
    for index, field in enumerate(table.schema):
        if _is_text_dictionary(field.type):
            table = table.set_column(index, field.with_type(pa.string()), plain(table.column(index)))
    return table


def objects(column: Column) -> np.ndarray:
    """A string column as a NumPy object array: one shared Python ``str`` per distinct value, None for null."""
    array = _array(column)
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    words = np.empty(len(array.dictionary) + 1, dtype=object)
    words[:-1] = array.dictionary.to_pylist()
    words[-1] = None
    return words[array.indices.fill_null(-1).to_numpy(zero_copy_only=False)]


def matches(column: Column, test: Callable[[pa.Array], pa.Array]) -> pa.BooleanArray:
    """``test`` (a plain-string predicate: ``lambda s: pc.starts_with(s, "nccl")``) of every row, False for nulls,
    evaluated once per distinct value."""
    array = _array(column)
    if not pa.types.is_dictionary(array.type):
        return pc.fill_null(test(array), False)
    hits = pc.fill_null(test(array.dictionary), False)
    return pc.fill_null(pc.take(hits, array.indices), False)


def map_values(column: Column, function: Callable[[pa.Array], pa.Array]) -> pa.DictionaryArray:
    """A :data:`STRING` array of ``function`` (string array -> string array) of every row, once per distinct value."""
    array = _encoded_column(column)
    return from_codes(array.indices, function(array.dictionary))
