"""Save / load: both layouts round-trip every table, the summary and the samples; torch stays out."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import textwrap

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, ProfileResult, schema
from aitune_dispatch.results import OpaqueValue, ResultFormatError, TensorMeta, load, logical_bytes, persist
from aitune_dispatch.results.persist import decode_value, encode_value

TABLES = ["activity", "ops", "calls", "modules", "module_calls", "launches", "kernel_sources"]
LAYOUTS = ["result_dir", "result.parquet"]


class Varied(nn.Module):
    """Functional calls whose samples hold lists, -0.0, NaN, a dtype, kwargs and strided tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        x = F.pad(self.norm(self.lin(x)), [1, 1], value=-0.0)
        x = F.softmax(x * scale, dim=-1, dtype=torch.float64)
        x = F.dropout(x, p=0.25, training=False)
        return F.threshold(x, 0.5, float("nan"))


def _samples() -> list:
    generator = torch.Generator().manual_seed(0)
    strided = torch.randn(5, 6, generator=generator)[::2]  # shape (3, 6), strides (12, 1)
    return [((torch.randn(3, 6, generator=generator),), {"scale": 2.0}), ((strided,), {})]


@pytest.fixture(scope="module")
def result() -> ProfileResult:
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    return profiler.profile_result(Varied(), _samples(), warmup_iterations=0)


def _as_saved(value):
    """What a sample value becomes after save/load without tensors (the documented mapping)."""
    if isinstance(value, torch.Tensor):
        return TensorMeta.from_tensor(value)
    if isinstance(value, torch.dtype):
        return OpaqueValue("torch.dtype", repr(value))
    if isinstance(value, tuple):
        return tuple(_as_saved(v) for v in value)
    if isinstance(value, list):
        return [_as_saved(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_saved(v) for k, v in value.items()}
    return value


# -- tables and summary ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", LAYOUTS)
def test_round_trip_keeps_every_table_and_field(result, tmp_path, name):
    loaded = load(result.save(tmp_path / name))
    for table in TABLES:
        assert getattr(loaded, table).equals(getattr(result, table), check_metadata=True), table
        assert getattr(loaded, table).schema == getattr(result, table).schema
    assert loaded.activity.num_rows == result.activity.num_rows > 0
    assert (loaded.source, loaded.dropped_records, loaded.warnings) == (result.source, result.dropped_records, ())
    assert dict(loaded.metadata) == dict(result.metadata) and loaded.metadata["device"] == "cpu"
    assert loaded.module_objects == ()  # live modules are not saved


@pytest.mark.parametrize("name", LAYOUTS)
def test_round_trip_keeps_describe_and_profiling_df(result, tmp_path, name):
    loaded = ProfileResult.load(result.save(tmp_path / name))
    for top_k in (10, 2, None):  # None: every function
        pd.testing.assert_frame_equal(loaded.describe(top_k), result.describe(top_k))
    assert loaded.describe()["tensor_size_MB"].gt(0).all()  # sizes come from the saved metadata
    before, after = result.profiling_df(), loaded.profiling_df()
    assert after["module"].isna().all() and before["module"].notna().all()
    pd.testing.assert_frame_equal(after.drop(columns="module"), before.drop(columns="module"))
    assert (loaded.coverage, loaded.total_us) == (result.coverage, result.total_us)


@pytest.mark.parametrize("name", LAYOUTS)
def test_samples_are_saved_as_metadata(result, tmp_path, name):
    loaded = load(result.save(tmp_path / name))
    expected = {
        fn: [(count, _as_saved(sample)) for count, sample in entries] for fn, entries in result.function_data.items()
    }
    assert list(loaded.function_data) == list(result.function_data)  # order of first appearance kept
    assert repr(loaded.function_data) == repr(expected)  # NaN != NaN, so compare the reprs as well
    pad_args = loaded.function_data["pad"][0][1]
    assert pad_args[0][1] == [1, 1] and math.copysign(1.0, pad_args[1]["value"]) == -1.0  # list and -0.0 kept
    assert math.isnan(loaded.function_data["threshold"][0][1][0][2])
    strided = loaded.function_data["linear"][1][1][0][0]
    assert strided == TensorMeta((3, 6), "float32", (12, 1), "cpu", "strided", 4)


def test_empty_result_round_trips(tmp_path):
    class NoFunctional(nn.Module):
        def forward(self, x):
            return x + 1

    empty = ModuleFunctionKernelProfiler(device="cpu").profile_result(NoFunctional(), [((torch.ones(2),), {})])
    loaded = load(empty.save(tmp_path / "empty.parquet"))
    assert loaded.function_data == {} and loaded.profiling_df().empty
    assert loaded.activity.equals(empty.activity) and loaded.calls.num_rows == 0
    pd.testing.assert_frame_equal(loaded.describe(), empty.describe())


# -- sample codec ------------------------------------------------------------------------------------
class Custom:
    def __repr__(self) -> str:
        return "Custom(7)"


def test_codec_maps_every_kind_of_value():
    view = torch.arange(12.0).reshape(3, 4).t()  # strides (1, 4)
    value = (
        view,
        nn.Parameter(torch.zeros(2, dtype=torch.float16)),
        {"k": [1, None, True, "s"], 3: (2.5, float("inf"), -0.0)},
        torch.float64,
        torch.Size([2, 3]),
        Custom(),
    )
    encoded = json.loads(json.dumps(encode_value(value), allow_nan=False))  # strict JSON, no NaN tokens
    decoded = decode_value(encoded)
    assert decoded[0] == TensorMeta((4, 3), "float32", (1, 4), "cpu", "strided", 4)
    assert decoded[1] == TensorMeta((2,), "float16", (1,), "cpu", "strided", 2)
    assert decoded[2] == {"k": [1, None, True, "s"], 3: (2.5, math.inf, -0.0)}
    assert math.copysign(1.0, decoded[2][3][2]) == -1.0
    assert decoded[3] == OpaqueValue("torch.dtype", "torch.float64") and repr(decoded[3]) == "torch.float64"
    assert decoded[4] == (2, 3)  # torch.Size is a tuple
    assert decoded[5] == OpaqueValue("test_persist.Custom", "Custom(7)")
    assert isinstance(decoded, tuple) and decode_value(encode_value(decoded)) == decoded  # stable when re-saved


def test_tensor_meta_describes_like_a_tensor():
    tensors = [torch.zeros(()), torch.zeros(2, 3, dtype=torch.float16), torch.zeros(4, 5).t(), torch.zeros(0, 3)]
    metas = [TensorMeta.from_tensor(t) for t in tensors]
    assert [m.numel() for m in metas] == [1, 6, 20, 0]
    assert [m.element_size() for m in metas] == [4, 2, 4, 4]
    assert [m.ndim for m in metas] == [0, 2, 2, 2]
    # 1*4 + 6*2 + 20*4 + 0*4 = 96 bytes, the same for the tensors and their metadata
    assert logical_bytes(tensors) == logical_bytes(metas) == 96


# -- tensors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", LAYOUTS)
def test_samples_with_tensors(result, tmp_path, name):
    path = result.save(tmp_path / name, with_tensors=True)
    if name.endswith(".parquet"):
        assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # still one file
    else:
        assert (path / "tensors.pt").is_file()
    loaded = load(path, with_tensors=True)
    for fn, entries in result.function_data.items():
        for (count, (args, kwargs)), (loaded_count, (loaded_args, loaded_kwargs)) in zip(
            entries, loaded.function_data[fn]
        ):
            assert count == loaded_count
            for original, restored in zip([*args, *kwargs.values()], [*loaded_args, *loaded_kwargs.values()]):
                if isinstance(original, torch.Tensor):
                    assert type(restored) is type(original)
                    assert torch.equal(restored, original) and restored.stride() == original.stride()
    pd.testing.assert_frame_equal(loaded.describe(), result.describe())
    assert isinstance(load(path).function_data["linear"][0][1][0][0], TensorMeta)  # tensors only on request


@pytest.mark.parametrize("name", LAYOUTS)
def test_with_tensors_needs_saved_tensors(result, tmp_path, name):
    path = result.save(tmp_path / name)
    with pytest.raises(ResultFormatError, match="with_tensors=True"):
        load(path, with_tensors=True)
    with pytest.raises(ValueError, match="tensor metadata only"):
        load(path).save(tmp_path / "again", with_tensors=True)


def test_resaving_a_directory_replaces_it(result, tmp_path):
    path = result.save(tmp_path / "run", with_tensors=True)
    result.save(path)
    assert not (path / "tensors.pt").exists()
    assert load(path).activity.equals(result.activity)


# -- layouts -----------------------------------------------------------------------------------------
def test_directory_layout(result, tmp_path):
    path = result.save(tmp_path / "run")
    names = sorted(p.name for p in path.iterdir())
    assert names == sorted(["manifest.json", *(f"{t}.parquet" for t in [*TABLES, "function_data"])])
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == persist.FORMAT and manifest["schema_version"] == schema.SCHEMA_VERSION
    assert manifest["tables"]["activity"]["rows"] == result.activity.num_rows
    stored = pq.read_table(path / "activity.parquet")  # plain Parquet, no wrapping
    assert stored.cast(result.activity.schema).equals(result.activity)
    assert pa.types.is_dictionary(stored.schema.field("kernel").type)  # strings stored once per value


def test_every_saved_column_states_its_unit_and_sentinel(result, tmp_path):
    path = result.save(tmp_path / "run")
    for name in [*TABLES, "function_data"]:
        for field in pq.read_schema(path / f"{name}.parquet"):
            assert field.metadata and b"unit" in field.metadata and b"sentinel" in field.metadata, (name, field)
            assert not pa.types.is_string(field.type), (name, field)  # every string column dictionary-typed
    activity = pq.read_schema(path / "activity.parquet")
    assert (
        activity.field("start_ns").metadata[b"unit"] == b"ns" and activity.field("kernel_us").metadata[b"unit"] == b"us"
    )
    assert activity.field("module_id").metadata[b"sentinel"] == b"-1: outside the profiled hierarchy"
    assert activity.field("stream").metadata[b"sentinel"] == b"-1: CPU"
    single = pq.read_schema(result.save(tmp_path / "run.parquet"))
    assert single.field("activity.call_id").metadata[b"sentinel"] == b"-1: no functional call encloses it"


def test_the_documented_recipe_reads_one_table_with_integers(result, tmp_path):
    f = result.save(tmp_path / "run.parquet")
    (recipe,) = [line.strip() for line in persist.__doc__.splitlines() if line.strip().startswith("pd.read_parquet(f")]
    frame = eval(recipe, {"pd": pd, "f": f})  # the one-liner from the module docstring, as written
    assert list(frame.columns) == [f"calls.{c}" for c in result.calls.column_names]  # not module_calls.*
    assert len(frame) == result.calls.num_rows
    assert str(frame["calls.module_id"].dtype) == "Int64" and str(frame["calls.start_ns"].dtype) == "Int64"
    assert frame["calls.parent_call_id"].tolist() == result.calls["parent_call_id"].to_pylist()
    # the same line for every table gives exactly that table's columns, integers as integers
    for name in TABLES:
        table, saved = eval(recipe.replace("calls", name), {"pd": pd, "f": f}), getattr(result, name)
        assert list(table.columns) == [f"{name}.{c}" for c in saved.column_names] and len(table) == saved.num_rows
        integers = [f"{name}.{field.name}" for field in saved.schema if field.type == pa.int64()]
        assert all(str(table[c].dtype) == "Int64" for c in integers), name


def test_single_file_layout(result, tmp_path):
    path = result.save(tmp_path / "run.parquet")
    file = pq.ParquetFile(path)
    manifest = json.loads(file.schema_arrow.metadata[persist.MANIFEST_KEY])
    assert manifest["schema_version"] == schema.SCHEMA_VERSION and manifest["layout"] == "file"
    assert file.schema_arrow.names[0] == "table"
    assert "activity.kernel_us" in file.schema_arrow.names and "modules.module_name" in file.schema_arrow.names
    per_group = [
        set(file.read_row_group(i, columns=["table"])["table"].to_pylist()) for i in range(file.num_row_groups)
    ]
    assert all(len(tables) <= 1 for tables in per_group)  # each row group holds one table (none: empty launches)
    frame = pd.read_parquet(path)
    modules = frame[frame["table"] == "modules"]
    assert modules["modules.module_name"].tolist() == result.modules["module_name"].to_pylist()


@pytest.mark.parametrize("name", LAYOUTS)
def test_newer_schema_version_is_refused(result, tmp_path, monkeypatch, name):
    with monkeypatch.context() as patch:
        patch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
        path = result.save(tmp_path / name)
    with pytest.raises(ResultFormatError) as info:
        load(path)
    message = str(info.value)
    assert f"version {schema.SCHEMA_VERSION + 1}" in message and f"({schema.SCHEMA_VERSION})" in message
    assert "upgrade aitune_dispatch" in message


def test_paths_that_hold_no_result(result, tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved result"):
        load(tmp_path / "missing")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    with pytest.raises(ResultFormatError, match="not a result saved by aitune_dispatch"):
        load(tmp_path / "other.parquet")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ResultFormatError, match="not a Parquet file"):
        load(tmp_path / "notes.txt")
    with pytest.raises(ResultFormatError, match="no manifest.json"):
        load(tmp_path)
    with pytest.raises(FileExistsError, match="non-empty directory"):
        result.save(tmp_path)


def test_top_level_load_and_compare_are_the_results_ones():
    from aitune_dispatch.results import compare

    assert aitune_dispatch.load is load and aitune_dispatch.compare is compare
    assert aitune_dispatch.TensorMeta is TensorMeta


# -- without torch -----------------------------------------------------------------------------------
NO_TORCH = textwrap.dedent(
    """
    import sys
    sys.modules["torch"] = None  # any `import torch` now raises ImportError
    import json
    import aitune_dispatch
    from aitune_dispatch import compare, load
    out = {}
    for path in sys.argv[1:]:
        result = load(path)
        out[path] = {
            "describe": result.describe().to_json(orient="split"),
            "modules": result.profiling_df()["module"].isna().all().item(),
            "compare_rows": len(compare(result, result)),
            "resaved": load(result.save(path + ".again.parquet")).activity.equals(result.activity),
        }
    try:
        aitune_dispatch.ModuleFunctionKernelProfiler
    except ImportError:
        out["profiler"] = "needs torch"
    out["torch_modules"] = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    print(json.dumps(out))
    """
)


def test_load_describe_compare_without_torch(result, tmp_path):
    paths = [str(result.save(tmp_path / name)) for name in LAYOUTS]
    run = subprocess.run([sys.executable, "-c", NO_TORCH, *paths], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["torch_modules"] == ["torch"] and out["profiler"] == "needs torch"  # only the blocking shim
    for path in paths:
        assert out[path]["describe"] == result.describe().to_json(orient="split")
        assert out[path]["modules"] is True and out[path]["resaved"] is True
        assert out[path]["compare_rows"] > 0


# -- compiled and graphed attribution: columns and table added later ------------------------------------
@pytest.mark.parametrize("name", LAYOUTS)
def test_compiled_attribution_round_trips(result, tmp_path, name):
    import dataclasses

    sources = pa.table(
        {"call_id": [7, 7], "kernel": ["triton_poi_fused_gelu_0"] * 2, "rank": [0, 1], "module_id": [2, 1],
         "module_name": ["norm", "lin"], "function_name": ["gelu", "linear"], "op": ["aten::gelu", "aten::addmm"],
         "source": ["gelu", "lin"]},
        schema=schema.KERNEL_SOURCES,
    )
    attribution = pa.array(["graph_launch"] + ["trace"] * (result.activity.num_rows - 1), pa.string())
    activity = result.activity.set_column(result.activity.schema.get_field_index("attribution"), "attribution",
                                          attribution)
    saved = dataclasses.replace(result, activity=activity, kernel_sources=sources)
    loaded = load(saved.save(tmp_path / name))
    # the result holds its string columns dictionary-encoded, the plain ones given included
    assert loaded.kernel_sources.equals(saved.kernel_sources) and loaded.activity.equals(saved.activity)
    assert loaded.kernel_sources.to_pylist() == sources.to_pylist()
    assert loaded.activity["attribution"].to_pylist() == attribution.to_pylist()


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_save_without_the_graph_columns_is_refused(result, tmp_path, name):
    # what save() wrote before activity had graph_id / graph_node_id / attribution
    activity = result.activity.drop_columns(["graph_id", "graph_node_id", "attribution"])
    path = dataclasses.replace(result, activity=activity).save(tmp_path / name)
    missing = r"lacks the columns \['graph_id', 'graph_node_id', 'attribution'\] of table 'activity'"
    with pytest.raises(ResultFormatError, match=missing):
        load(path)


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_save_without_the_calls_sample_column_is_refused(result, tmp_path, name):
    # what save() wrote before functional calls had a sample column
    path = dataclasses.replace(result, calls=result.calls.drop_columns(["sample"])).save(tmp_path / name)
    with pytest.raises(ResultFormatError, match=r"lacks the columns \['sample'\] of table 'calls'"):
        load(path)


