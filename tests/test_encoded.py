"""Repeated strings are dictionary-encoded end to end: built so, kept so through save, load and merge,
decoded to plain strings in every DataFrame the results return."""

from __future__ import annotations

import base64
import json
import shutil

import fixture_results
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import aitune_dispatch
from aitune_dispatch import encoded, schema
from aitune_dispatch.collection.decoded import DecodedRecords
from aitune_dispatch.demo import demo_workload
from aitune_dispatch.results import merge, select_rank, views

TABLES = ("activity", "ops", "calls", "modules", "launches", "kernel_sources")
PLAIN = pd.Series(["a"]).dtype  # what pandas gives a column of Python strings (object, or "str" from pandas 3)
LAYOUTS = ["result_dir", "result.parquet"]


def string_columns(table: pa.Table) -> list[str]:
    return [f.name for f in table.schema if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]


def assert_encoded(result: aitune_dispatch.ProfileResult) -> None:
    """Every string column of every table: schema.STRING, one chunk, each value once in its dictionary."""
    for name in TABLES:
        table = getattr(result, name)
        for column in string_columns(table):
            assert table.schema.field(column).type == schema.STRING, (name, column)
            assert encoded.is_encoded(table[column]), (name, column)


def assert_plain(frame: pd.DataFrame, columns: list[str]) -> None:
    for column in columns:
        assert frame[column].dtype == PLAIN, (column, frame[column].dtype)
        assert not isinstance(frame[column].dtype, pd.CategoricalDtype)
        assert all(v is None or v != v or type(v) is str for v in frame[column]), column  # v != v: NaN


# -- the schemas and a profiled run -------------------------------------------------------------------------
@pytest.mark.single_backend
def test_the_schemas_of_the_result_tables_declare_every_string_column_dictionary_encoded():
    for table_schema in (schema.KERNELS, schema.LAUNCHES, schema.OPS, schema.CALLS, schema.MODULES, schema.ACTIVITY,
                         schema.KERNEL_SOURCES):  # fmt: skip
        assert not [f.name for f in table_schema if pa.types.is_string(f.type)], table_schema
    assert schema.ACTIVITY.field("kernel").type == pa.dictionary(pa.int32(), pa.string()) == encoded.STRING


def test_a_profiled_run_keeps_every_string_column_dictionary_encoded(cpu_profiler):
    model, samples = demo_workload("cpu")
    result = cpu_profiler.profile_result(model, samples, warmup_iterations=0)
    assert_encoded(result)
    kernels = result.activity["kernel"].chunk(0)
    # each name once (the native tracer interns names per process: the dictionary may hold earlier runs' names)
    used = set(encoded.plain(kernels).to_pylist())
    assert used <= set(kernels.dictionary.to_pylist()) and len(used) < result.activity.num_rows
    assert result.activity.schema == schema.ACTIVITY


def test_the_spec_outputs_and_every_frame_have_plain_string_columns(cpu_profiler):
    model, samples = demo_workload("cpu")
    profiling_df, _ = cpu_profiler.profile(model, samples, warmup_iterations=0)
    assert list(profiling_df.columns) == schema.PROFILING_COLUMNS
    assert_plain(profiling_df, ["module_name", "function_name", "op", "kernel"])
    result = cpu_profiler.last_result
    assert_plain(result.to_pandas(), ["kernel", "kind", "op", "module_name", "function_name", "attribution"])
    assert_plain(result.unattributed(), ["kernel", "kind", "op", "module_name", "function_name"])
    summary = result.describe()
    string = profiling_df["function_name"].dtype  # the one string dtype (tests/test_frames.py checks every frame)
    assert summary["function_name"].dtype == string and all(type(v) is str for v in summary["function_name"])
    assert views.kernel_table(result)["kernel"].dtype == string
    # the categorical view is there for whoever asks the table for it
    assert isinstance(result.activity.to_pandas()["kernel"].dtype, pd.CategoricalDtype)


# -- building: decoders, tracers, the join -------------------------------------------------------------------
@pytest.mark.single_backend
def test_decoded_records_keep_names_as_codes_and_names_that_demangle_alike_as_one_value():
    mangled = "_ZN2at6native6kernelEv"  # demangles to "at::native::kernel()"
    ids = np.arange(4, dtype=np.int64)
    records = DecodedRecords(
        ids, ids, ids + 1, np.zeros(4, np.int64), np.zeros(4, np.int64), np.array([0, 0, 1, 2], np.int8),
        np.array([0, 1, 2, 0], np.int32), [mangled, "at::native::kernel()", "k"], ids, ids, 4,
        api_correlation_id=ids, api_kind=np.array([0, 0, 1, 0], np.int8),
        api_cbid=np.array([211, 211, 307, 41], np.int32), api_start_ns=ids, api_end_ns=ids, api_thread=ids,
    )  # fmt: skip
    kernels = records.kernels_table()
    name = kernels["name"].chunk(0)
    assert kernels.schema == schema.KERNELS_WITH_GRAPHS
    assert name.dictionary.to_pylist() == ["at::native::kernel()", "k"]  # two codes, one value
    assert name.to_pylist() == ["at::native::kernel()", "at::native::kernel()", "k", "at::native::kernel()"]
    assert kernels["kind"].to_pylist() == ["kernel", "kernel", "memcpy", "memset"]
    launches = records.launches_table({(0, 211): "cudaLaunchKernel", (0, 41): "cudaMemcpyAsync"})
    assert launches.schema == schema.LAUNCHES
    assert launches["api"].to_pylist() == ["runtime", "runtime", "driver", "runtime"]
    assert launches["api_name"].to_pylist() == ["cudaLaunchKernel", "cudaLaunchKernel", "driver cbid 307",
                                                "cudaMemcpyAsync"]  # fmt: skip
    for table in (kernels, launches):
        assert all(encoded.is_encoded(table[c]) for c in string_columns(table))


@pytest.mark.single_backend
def test_the_join_holds_no_per_row_string():
    # 100,000 kernels of three 300-character names: the joined columns hold 4-byte codes per row
    rows, name = 100_000, "k" * 300
    kernels = pa.table(
        {
            "correlation_id": np.arange(rows, dtype=np.int64),
            "name": encoded.from_codes(np.arange(rows) % 3, [name + "0", name + "1", name + "2"]),
            "start_ns": np.arange(rows, dtype=np.int64),
            "end_ns": np.arange(rows, dtype=np.int64) + 5,
            "device": np.zeros(rows, np.int32),
            "stream": np.zeros(rows, np.int64),
            "kind": encoded.constant(schema.KIND_KERNEL, rows),
        },
        schema=schema.KERNELS,
    )
    correlation = pa.table({"correlation_id": np.arange(rows, dtype=np.int64), "op_id": np.zeros(rows, np.int64)},
                           schema=schema.CORRELATION)  # fmt: skip
    ops = pa.table([[0], ["aten::mm"], [1], [0], [0], [0], [0]], schema=schema.OPS)
    calls = pa.table([[0], ["linear"], [-1], [1], [0], [0], [0], [0]], schema=schema.CALLS)
    modules = pa.table([[0, 1], ["", "fc"], ["Net", "Linear"], [-1, 0]], schema=schema.MODULES)
    activity = fixture_results.join_tables(kernels, correlation, ops, calls, modules)
    for column in ("kernel", "kind", "op", "module_name", "function_name", "attribution"):
        # 4 bytes a row plus the few distinct values (as plain strings: 300 bytes a row for kernel)
        assert activity[column].nbytes < 4 * rows + 2_000, (column, activity[column].nbytes)
    assert encoded.objects(activity["kernel"])[:4].tolist() == [name + "0", name + "1", name + "2", name + "0"]
    assert activity["op"].chunk(0).dictionary.to_pylist() == ["aten::mm"]


# -- save and load --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", LAYOUTS)
def test_save_and_load_keep_values_and_types(demo_result, tmp_path, name):
    loaded = aitune_dispatch.load(demo_result.save(tmp_path / name))
    assert_encoded(loaded)
    for table in TABLES:
        assert getattr(loaded, table).schema == getattr(demo_result, table).schema, table
        assert getattr(loaded, table).to_pylist() == getattr(demo_result, table).to_pylist(), table
    pd.testing.assert_frame_equal(loaded.profiling_df().drop(columns="module"),
                                  demo_result.profiling_df().drop(columns="module"))  # fmt: skip
    pd.testing.assert_frame_equal(loaded.to_pandas(), demo_result.to_pandas())


@pytest.mark.single_backend
def test_saved_files_are_dictionary_encoded_and_their_manifest_names_plain_strings(tmp_path):
    # the manifest names the logical type, as results saved before did: older versions read these files as theirs
    result = fixture_results.synthetic_result()
    folder = result.save(tmp_path / "saved")
    assert pa.types.is_dictionary(pq.read_schema(folder / "activity.parquet").field("kernel").type)
    manifest = json.loads((folder / "manifest.json").read_text())
    stored = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(manifest["tables"]["activity"]["schema"])))
    assert stored.field("kernel").type == pa.string() and stored.field("attribution").type == pa.string()


@pytest.mark.single_backend
def test_a_result_saved_with_plain_strings_loads_dictionary_encoded(tmp_path):
    # the manifest names string columns plain (string); a Parquet file holding them plain loads encoded too
    folder = shutil.copytree(fixture_results.H200_RESULT, tmp_path / "h200")
    raw = encoded.decoded(pq.read_table(folder / "activity.parquet"))
    pq.write_table(raw, folder / "activity.parquet")
    assert pq.read_schema(folder / "activity.parquet").field("kernel").type == pa.string()
    loaded = aitune_dispatch.load(folder)
    assert_encoded(loaded)
    assert loaded.activity.select(raw.column_names).to_pylist() == raw.to_pylist()
    assert loaded.describe()["function_name"].tolist()[:2] == ["linear", "layer_norm"]


@pytest.mark.single_backend
def test_row_groups_with_their_own_dictionaries_load_as_one_dictionary_per_column(tmp_path):
    # a large table is written in several row groups, each with its own dictionary; the loaded column has one
    result = fixture_results.synthetic_result()
    folder = result.save(tmp_path / "saved")
    activity = pq.read_table(folder / "activity.parquet")
    parts = [activity.slice(i, 1) for i in range(activity.num_rows)]
    kernels = [encoded.from_codes([0], [value]) for value in activity["kernel"].to_pylist()]
    pieces = [part.set_column(part.schema.get_field_index("kernel"), "kernel", k) for part, k in zip(parts, kernels)]
    pq.write_table(pa.concat_tables(pieces), folder / "activity.parquet", row_group_size=1)
    assert pq.ParquetFile(folder / "activity.parquet").metadata.num_row_groups == activity.num_rows
    loaded = aitune_dispatch.load(folder)
    assert_encoded(loaded)
    assert loaded.activity["kernel"].to_pylist() == result.activity["kernel"].to_pylist()


# -- merge -----------------------------------------------------------------------------------------------------
@pytest.mark.single_backend
def test_merging_results_with_different_dictionaries_gives_one_dictionary_per_column():
    first, second = fixture_results.synthetic_result(), fixture_results.layered_result()
    assert first.activity["kernel"].chunk(0).dictionary != second.activity["kernel"].chunk(0).dictionary
    merged = merge([first, second], ranks=[0, 1])
    assert_encoded(merged)
    for table in TABLES:
        for column in string_columns(getattr(merged, table)):  # the ranks' values, in rank order
            expected = getattr(first, table)[column].to_pylist() + getattr(second, table)[column].to_pylist()
            assert getattr(merged, table)[column].to_pylist() == expected, (table, column)
    kernels = merged.activity["kernel"].chunk(0).dictionary.to_pylist()
    assert sorted(kernels) == sorted(set(first.activity["kernel"].to_pylist() + second.activity["kernel"].to_pylist()))
    # grouping by a string column needs the one dictionary
    assert views.kernel_table(merged)["calls"].sum() == merged.activity.num_rows
    assert merged.describe(by="rank")["rank"].tolist() == [0, 1]
    assert select_rank(merged, 1).activity["kernel"].to_pylist() == second.activity["kernel"].to_pylist()


@pytest.mark.single_backend
def test_merging_a_fresh_and_a_loaded_result(demo_result):
    merged = merge([demo_result, aitune_dispatch.load(fixture_results.H200_RESULT)], ranks=[0, 1])
    assert_encoded(merged)
    assert merged.activity["kernel"].to_pylist() == (
        demo_result.activity["kernel"].to_pylist() + aitune_dispatch.load(fixture_results.H200_RESULT).activity[
            "kernel"].to_pylist()
    )  # fmt: skip
    assert list(merged.profiling_df().columns) == schema.PROFILING_COLUMNS


# -- the helpers ---------------------------------------------------------------------------------------------
@pytest.mark.single_backend
def test_objects_keeps_nulls_where_chunked_to_numpy_does_not():
    column = pa.chunked_array([encoded.from_codes(pa.array([0, 1, None, 0], pa.int32()), ["a", "b"])])
    values = encoded.objects(column)
    assert values.tolist() == ["a", "b", None, "a"] and values.dtype == object
    assert values[0] is values[3]  # one Python string per distinct value


@pytest.mark.single_backend
def test_encoded_normalises_plain_large_multi_chunk_and_narrow_index_columns():
    chunked = pa.chunked_array([encoded.from_codes([0, 1], ["a", "b"]), encoded.from_codes([0, 1], ["b", "c"])])
    narrow = pa.DictionaryArray.from_arrays(pa.array([1, 0, 1], pa.int8()), pa.array(["x", "x"], pa.large_string()))
    table = pa.table({"plain": ["p", None, "p", "q"], "large": pa.array(["l"] * 4, pa.large_string()),
                      "chunked": chunked, "narrow": pa.concat_arrays([narrow, narrow.slice(0, 1)]),
                      "n": [1, 2, 3, 4]})  # fmt: skip
    out = encoded.encoded(table)
    for column in ("plain", "large", "chunked", "narrow"):
        assert out.schema.field(column).type == encoded.STRING and encoded.is_encoded(out[column]), column
        assert out[column].to_pylist() == table[column].to_pylist(), column
    assert out["narrow"].chunk(0).dictionary.to_pylist() == ["x"]  # a repeated value is kept once
    assert out["n"].equals(table["n"])
    again = encoded.encoded(out)  # encoded columns are kept as they are: the same buffers, no copy
    address = [t["chunked"].chunk(0).indices.buffers()[1].address for t in (out, again)]
    assert again.equals(out) and address[0] == address[1]
    assert encoded.decoded(out).to_pandas().equals(encoded.decoded(table).to_pandas())


@pytest.mark.single_backend
def test_matches_and_map_values_work_once_per_distinct_value():
    column = encoded.from_codes(pa.array([0, 1, None, 2, 0], pa.int32()), ["ncclKernel", "gemm", "nccl_x"])
    assert encoded.matches(column, lambda s: pc.starts_with(s, "nccl")).to_pylist() == [True, False, False, True, True]
    prefixed = encoded.map_values(column, lambda s: pc.binary_join_element_wise("cpu::", s, ""))
    assert prefixed.to_pylist() == ["cpu::ncclKernel", "cpu::gemm", None, "cpu::nccl_x", "cpu::ncclKernel"]
    assert len(prefixed.dictionary) == 3


@pytest.mark.single_backend
def test_plain_decodes_in_chunks_without_changing_values():
    rows = 3 * encoded.DECODE_ROWS + 5
    column = encoded.from_codes(np.arange(rows) % 2, ["even", "odd"])
    decoded = encoded.plain(column, pa.large_string())
    assert decoded.type == pa.large_string() and decoded.num_chunks == 4 and len(decoded) == rows
    assert decoded.to_pylist()[-2:] == [("even", "odd")[(rows - 2) % 2], ("even", "odd")[(rows - 1) % 2]]


@pytest.mark.single_backend
def test_a_result_built_from_plain_string_tables_is_encoded():
    # hand-made tables (tests, users) may hold plain strings: the result encodes them
    result = fixture_results.synthetic_result()
    plain_ops = encoded.decoded(result.ops)
    assert plain_ops.schema.field("op").type == pa.string()
    tables = {**{name: getattr(result, name) for name in schema.RESULT_TABLES}, "ops": plain_ops}
    rebuilt = aitune_dispatch.ProfileResult(**tables, function_data={}, source="test")
    assert rebuilt.ops.schema.field("op").type == schema.STRING
    assert rebuilt.ops["op"].to_pylist() == result.ops["op"].to_pylist()


def test_the_cpu_source_names_each_distinct_op_once(cpu_profiler):
    model, samples = demo_workload("cpu")
    result = cpu_profiler.profile_result(model, samples, warmup_iterations=0)
    kernels = result.activity["kernel"].chunk(0).dictionary.to_pylist()
    ops = result.ops["op"].chunk(0).dictionary.to_pylist()
    assert all(k.startswith(schema.CPU_KERNEL_PREFIX) for k in kernels)
    assert {k.removeprefix(schema.CPU_KERNEL_PREFIX) for k in kernels} <= set(ops)
