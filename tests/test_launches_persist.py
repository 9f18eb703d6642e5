"""The ``launches`` table of a result: saved and loaded in both layouts, merged per rank, and a save
without it refused (the committed H200 demo recording has one)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from fixture_results import H200_RESULT, synthetic_result

import aitune_dispatch
from aitune_dispatch import schema
from aitune_dispatch.results import ResultFormatError, load, merge, persist, select_rank

LAYOUTS = ["result_dir", "result.parquet"]


@pytest.mark.parametrize("name", LAYOUTS)
def test_launches_round_trip(tmp_path, name):
    result = synthetic_result(launches=True)
    loaded = load(result.save(tmp_path / name))
    assert loaded.launches.schema == schema.LAUNCHES and loaded.launches.equals(result.launches)
    # the four records of synthetic_launches, CUPTI clock = host + 1,000,000 ns
    assert loaded.launches.to_pydict() == {
        "correlation_id": [10, 11, 12, 13],
        "api": ["runtime", "runtime", "driver", "runtime"],
        "cbid": [211, 41, 220, 211],
        "api_name": ["cudaLaunchKernel", "cudaMemcpyAsync", "cuMemsetD32Async", "cudaLaunchKernel"],
        "start_ns": [1_004_500, 1_008_300, 1_008_850, 1_008_900],
        "end_ns": [1_004_700, 1_008_400, 1_008_900, 1_008_950],
        "os_thread": [77, 77, 77, 99],
    }


def test_saved_launch_columns_state_their_unit_and_sentinel(tmp_path):
    import pyarrow.parquet as pq

    path = synthetic_result(launches=True).save(tmp_path / "run")
    stored = pq.read_schema(path / "launches.parquet")
    assert stored.names == schema.LAUNCH_COLUMNS
    assert stored.field("start_ns").metadata[b"unit"] == b"ns"
    assert stored.field("api").metadata[b"sentinel"] == b"'runtime' or 'driver': the CUDA API of a launch record"


def test_the_h200_recording_without_its_launches_table_is_refused(tmp_path):
    result = aitune_dispatch.load(H200_RESULT)
    assert result.launches.num_rows > 0 and result.launches.schema == schema.LAUNCHES
    copy = shutil.copytree(H200_RESULT, tmp_path / "h200")
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["tables"]["launches"]  # what save() wrote before the table existed
    (copy / "manifest.json").write_text(json.dumps(manifest))
    (copy / "launches.parquet").unlink()
    with pytest.raises(ResultFormatError, match=r"lacks the tables \['launches'\]"):
        load(copy)


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_save_without_the_table_is_refused(tmp_path, monkeypatch, name):
    tables = persist._result_tables

    def without_launches(result):  # what save() wrote before the table existed
        return {key: table for key, table in tables(result).items() if key != "launches"}

    monkeypatch.setattr(persist, "_result_tables", without_launches)
    path = synthetic_result(launches=True).save(tmp_path / name)
    monkeypatch.undo()
    with pytest.raises(ResultFormatError, match=r"lacks the tables \['launches'\]"):
        load(path)


def test_merge_keeps_each_ranks_launches_and_select_rank_gives_them_back():
    one = synthetic_result(launches=True, metadata={"rank": "0", "world_size": "2"})
    two = dataclasses.replace(one, metadata={"rank": "1", "world_size": "2"})
    merged = merge([one, two])
    # 4 launch records per rank, in rank order, correlation ids kept as each rank recorded them
    assert merged.launches[schema.RANK_COLUMN].to_pylist() == [0] * 4 + [1] * 4
    assert merged.launches["correlation_id"].to_pylist() == [10, 11, 12, 13] * 2
    assert select_rank(merged, 1).launches.equals(two.launches)
