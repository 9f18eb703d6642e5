"""The arithmetic of ``benchmarks/fixed_cost.py``: each configured pass against the bare passes around it,
and the line through the R's, on numbers chosen so that the answer is known."""

from __future__ import annotations

import pytest

from benchmarks.fixed_cost import excess, fit, render


def test_a_pass_is_compared_with_the_mean_of_the_bare_passes_around_it():
    # bare, a, bare, b, bare, a, bare, b, bare: two configurations, two rounds, on a machine slowing
    # down by 1 ms per bare pass; config a costs 3 ms more than bare, config b 5 ms
    bare = [10.0, 11.0, 12.0, 13.0, 14.0]
    config_a = [10.5 + 3, 12.5 + 3]  # run between bare passes 0-1 and 2-3: the drift at its time is the mean
    config_b = [11.5 + 5, 13.5 + 5]  # between 1-2 and 3-4
    assert excess(config_a, bare, 0, 2) == [3.0, 3.0]
    assert excess(config_b, bare, 1, 2) == [5.0, 5.0]


def test_the_line_through_the_repeats_gives_the_fixed_and_the_per_repeat_cost():
    # excess = 0.4 + 2.5 R at R = 1, 2, 8: 2.9, 5.4, 20.4
    a, b = fit([1, 2, 8], [2.9, 5.4, 20.4])
    assert a == pytest.approx(0.4)
    assert b == pytest.approx(2.5)


def test_the_tables_have_as_many_cells_as_columns_whichever_configurations_ran():
    def result(configs: list[str]) -> dict:
        repeats = [1, 2, 8]
        out = {"model": "m", "repeats": repeats, "configs": configs, "bare": {r: [0.01] * 3 for r in repeats}}
        for config in configs:
            out[f"{config} fit"] = (0.0001, 0.001)
            out[f"{config} a per round"] = [0.0001, 0.0002]
            out[f"{config} a interval"] = (0.0, 0.0003)
        out.update({"empty": [0.00002], "empty bare": [0.00001], "cupti_first_second_s": [0.001, 0.001]})
        return out

    for configs in (["ours"], ["ours", "cupti only", "tracing only"]):
        rows = [line for line in render([result(configs)]).splitlines() if line.startswith("|")]
        assert len({line.count("|") for line in rows[:3]}) == 1, rows[:3]  # header, rule and row of the first
        assert len({line.count("|") for line in rows[3:]}) == 1, rows[3:]  # and of the second table
        assert "|  |" not in "\n".join(rows)  # no column without a name
