"""describe_results on hand-made frames: exact arithmetic, ordering, top_k and NaN rules."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from aitune_dispatch import describe_results
from aitune_dispatch.schema import SUMMARY_COLUMNS


def frame(rows):
    return pd.DataFrame(rows, columns=["module_name", "module", "function_name", "op", "kernel", "kernel_us"])


def test_summary_arithmetic_and_order():
    df = frame(
        [
            ("a", None, "linear", "aten::addmm", "gemm", 30.0),
            ("b", None, "linear", "aten::addmm", "gemm", 10.0),
            ("a", None, "relu", "aten::relu", "relu_k", 5.0),
            ("c", None, "softmax", "aten::_softmax", "softmax_k", 55.0),
        ]
    )
    x = torch.zeros(4, 8)  # 4 * 8 * 4 bytes = 128 bytes
    data = {"linear": [(3, ((x,), {})), (1, ((x[:2],), {}))], "relu": [(2, ((x,), {}))]}
    summary = describe_results(df, data)
    assert list(summary.columns) == SUMMARY_COLUMNS
    # total 100 us: softmax 55, linear 30 + 10 = 40, relu 5
    assert summary["function_name"].tolist() == ["softmax", "linear", "relu"]
    assert summary["time_spent_us"].tolist() == [55.0, 40.0, 5.0]
    assert summary["time_spent_pct"].tolist() == pytest.approx([55.0, 40.0, 5.0])
    assert summary["num_modules"].tolist() == [1, 2, 1]
    linear = summary.set_index("function_name").loc["linear"]
    assert linear["calls"] == 4 and linear["num_distinct_samples"] == 2
    assert linear["tensor_size_MB"] == pytest.approx((128 + 64) / 2**20)
    assert math.isnan(summary.set_index("function_name").loc["softmax", "calls"])


def test_top_k_keeps_the_share_over_all_functions():
    df = frame([("m", None, name, "op", "k", us) for name, us in (("a", 60.0), ("b", 30.0), ("c", 10.0))])
    summary = describe_results(df, {}, top_k=1)
    assert summary["function_name"].tolist() == ["a"]
    assert summary["time_spent_pct"].item() == 60.0  # 60 / (60 + 30 + 10), not 60 / 60


def test_empty_frame_gives_empty_summary_with_columns():
    summary = describe_results(frame([]), {})
    assert summary.empty and list(summary.columns) == SUMMARY_COLUMNS


def test_negative_top_k_is_rejected():
    with pytest.raises(ValueError, match="top_k"):
        describe_results(frame([]), {}, top_k=-1)


def test_swapped_arguments_are_named_as_such():
    df = frame([("m", None, "relu", "aten::relu", "k", 1.0)])
    data = {"relu": [(1, ((torch.zeros(2),), {}))]}
    with pytest.raises(TypeError) as info:
        describe_results(data, df)
    assert str(info.value) == (
        "describe_results(profiling_df, function_data): profiling_df must be a pandas DataFrame (the first value "
        "profile() returns); got dict — were the arguments swapped?"
    )


@pytest.mark.parametrize(
    ("profiling_df", "function_data", "says"),
    [
        (None, {}, "profiling_df must be a pandas DataFrame (the first value profile() returns); got NoneType"),
        ("df", {}, "profiling_df must be a pandas DataFrame (the first value profile() returns); got str"),
        (frame([]), None, "function_data must be the dict profile() returns second"),
        (frame([]), [(1, ((), {}))], "got list"),
    ],
)
def test_arguments_of_the_wrong_type_name_the_argument(profiling_df, function_data, says):
    with pytest.raises(TypeError, match=r"^describe_results\(profiling_df, function_data\): ") as info:
        describe_results(profiling_df, function_data)
    assert says in str(info.value)
    assert "swapped" not in str(info.value)


def test_a_profile_result_is_pointed_to_its_describe():
    class Result:  # stands for a ProfileResult: describe_results reads it by duck typing
        def profiling_df(self):
            return frame([])

        function_data: dict = {}

    with pytest.raises(TypeError, match=r"got Result: pass result\.profiling_df\(\), result\.function_data"):
        describe_results(Result(), {})


def test_a_frame_without_the_profiling_columns_names_them():
    with pytest.raises(ValueError, match=r"profiling_df has no column\(s\) \['function_name', 'module_name'\]"):
        describe_results(pd.DataFrame({"kernel_us": [1.0]}), {})
