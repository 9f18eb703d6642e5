"""``benchmarks/step_cost.py``: its per-step excess is ``(stepped − one step) / steps`` of the same round,
and a CPU smoke run records what it times (no time is asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks import step_cost


def test_the_excess_per_step_is_the_stepped_block_less_the_one_step_block_over_the_steps(tmp_path):
    argv = ["--out", str(tmp_path), "--models", "mlp", "--steps", "4", "--rounds", "2", "--device", "cpu"]
    assert step_cost.main(argv) == 0
    saved = json.loads((tmp_path / "step_cost.json").read_text())
    (row,) = saved["rows"]
    seconds = row["seconds"]
    assert {key: len(values) for key, values in seconds.items()} == {"bare": 2, "one step": 2, "stepped": 2}
    expected = [1e3 * (s - o) / 4 for s, o in zip(seconds["stepped"], seconds["one step"])]
    assert row["excess_ms"] == pytest.approx(expected)
    page = (tmp_path / "step_cost.md").read_text()
    assert "| mlp | cpu | 4 |" in page and saved["meta"]["command"].startswith("python -m benchmarks.step_cost")


def test_the_table_reports_medians_as_ratios_to_bare():
    row = {
        "model": "m", "device": "cpu", "steps": 10, "excess_ms": [0.01, 0.03, 0.02],
        "seconds": {"bare": [1.0, 2.0, 3.0], "one step": [2.0, 4.0, 6.0], "stepped": [3.0, 6.0, 9.0]},
    }  # fmt: skip
    line = step_cost.table([row]).splitlines()[-1]
    assert "| 2000.00 | 2.000 | 3.000 | +0.0200 | +0.0100 .. +0.0300 |" in line
