"""Every DataFrame a result returns uses one string dtype and integer counts (issue 22, item 6).

pandas 3 gives ``str`` to the Arrow-backed frames (``profiling_df()``, ``to_pandas()``); a view that
built its strings as ``object`` beside them made the same kind of column read two ways, and a float
``num_modules`` printed ``2.0``. The check runs over every frame-returning call, on the committed H200
run, a CPU run and a result with no rows, so a new view that forgets the convention fails here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from fixture_results import layered_result
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, ProfileResult, compare
from aitune_dispatch.results import views

STRING = pd.Series(["a"]).dtype  # what pandas infers for Python strings: the one string dtype
# columns that hold objects by design: the live module, the members behind a module pattern
OBJECT_COLUMNS = {"module", "members"}
# what a count column is called; every one must be an integer dtype
COUNTS = {"calls", "count", "kernels", "launches", "instances", "forwards", "modules", "sample", "ranks"}
COUNTS |= {"num_modules", "activity_rows", "before_kernels", "after_kernels", "before_calls", "after_calls"}
# the spec's describe_results() gives NaN calls/num_distinct_samples where sampling was off for a
# function, so those two are float there (and int64 where every function was sampled)
SPEC_NAN_COUNTS = {"calls", "num_distinct_samples"}


def _frames(result: ProfileResult) -> dict[str, pd.DataFrame]:
    return {
        "profiling_df": result.profiling_df(),
        "to_pandas": result.to_pandas(),
        "describe": result.describe(),
        "samples": result.samples(),
        "unattributed": result.unattributed(),
        "kernel_rollup": result.kernel_rollup(),
        "device_busy": result.device_busy(),
        "idle_gaps": result.idle_gaps(),
        "kernel_table": views.kernel_table(result),
        "module_table": views.module_table(result),
        "unattributed_table": views.unattributed_table(result),
        "compare": compare(result, result),
        "rank_summary": views.rank_summary(result),
        "function_ranks": views.function_ranks(result),
        "collectives": views.collectives(result),
        "samples_roofline": result.samples(roofline=True),
        "describe_roofline": result.describe(roofline=True),
        "worth_optimizing": result.worth_optimizing(),
        "module_roofline": result.module_roofline(),
        "kernel_origins": views.kernel_origins(result),
    }


def _cpu_result() -> ProfileResult:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).eval()
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    return profiler.profile_result(model, [((torch.randn(2, 8),), {})], warmup_iterations=0)


def _empty_result() -> ProfileResult:
    empty = pa.table({})
    return ProfileResult(layered_result().activity.slice(0, 0), empty, empty, empty, empty, {}, "empty")


@pytest.fixture(scope="module", params=["h200", "cpu", "layered", "empty"])
def frames(request, h200_result) -> dict[str, pd.DataFrame]:
    make = {"h200": lambda: h200_result, "cpu": _cpu_result, "layered": layered_result, "empty": _empty_result}
    return _frames(make[request.param]())


def _holds_strings(column: pd.Series) -> bool:
    return pd.api.types.infer_dtype(column, skipna=True) == "string"


def test_every_string_column_has_the_one_string_dtype(frames):
    for name, frame in frames.items():
        for column in frame.columns:
            if column in OBJECT_COLUMNS:
                continue
            series = frame[column]
            strings = _holds_strings(series) or (series.dtype == object and series.isna().all())
            if strings:
                assert series.dtype == STRING, f"{name}.{column} is {series.dtype}, not {STRING}"
            # before pandas 3 the one string dtype is object itself: then only a string column may be object
            string_objects = STRING == np.dtype(object) and strings
            assert series.dtype != object or column in OBJECT_COLUMNS or string_objects, (
                f"{name}.{column} holds {series.dtype}"
            )


def test_every_count_column_is_an_integer(frames):
    for name, frame in frames.items():
        for column in COUNTS & set(frame.columns):
            dtype = frame[column].dtype
            if name.startswith("describe") and column in SPEC_NAN_COUNTS and dtype == np.float64:
                assert frame[column].isna().any() or frame.empty, f"describe.{column} is float without a NaN"
                continue
            assert pd.api.types.is_integer_dtype(dtype), f"{name}.{column} is {dtype}"
