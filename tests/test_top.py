"""One rule for every row limit of the API (``top``, ``top_k``; the CLI's ``--top``: tests/test_cli.py):
None keeps every row, a positive integer keeps that many, anything else is a ValueError naming the
argument, never a slice (``head(-1)`` drops the last row, ``head(True)`` keeps one)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from aitune_dispatch.reports import text
from aitune_dispatch.reports.ranks import rank_text
from aitune_dispatch.results import compare, views

NOT_COUNTS = [-1, 0, 1.5, True, "3"]


def _headline(result, top):  # noqa: ANN001, ANN202
    return pd.DataFrame(views.headline(result, top=top).top_functions, columns=["function_name", "us"])


# each limited table: (how to get it with a limit, the limit's argument name)
TABLES = {
    "kernel_rollup": (lambda result, n: result.kernel_rollup(top=n), "top"),
    "kernel_table": (lambda result, n: views.kernel_table(result, top=n), "top"),
    "idle_gaps": (lambda result, n: result.idle_gaps(top=n), "top"),
    "worth_optimizing": (lambda result, n: result.worth_optimizing(top=n), "top"),
    "unattributed_table": (lambda result, n: views.unattributed_table(result, top=n), "top"),
    "describe": (lambda result, n: result.describe(top_k=n), "top_k"),
    "describe_by_device": (lambda result, n: result.describe(top_k=n, by="device"), "top_k"),
    "describe_results": (
        lambda result, n: views.describe_results(result.profiling_df(), result.function_data, top_k=n),
        "top_k",
    ),
    "headline": (_headline, "top"),
}

# each text renderer of a result: (how to call it with a limit, the limit's argument name)
TEXTS = {
    "summary_text": (lambda result, n: text.summary_text(result, top_k=n), "top_k"),
    "unattributed_text": (lambda result, n: text.unattributed_text(result, top=n), "top"),
    "kernels_text": (lambda result, n: text.kernels_text(result, top=n), "top"),
    "gpu_time_text": (lambda result, n: text.gpu_time_text(result, top=n), "top"),
    "worth_text": (lambda result, n: text.worth_text(result, top=n), "top"),
    "TextRenderer": (lambda result, n: text.TextRenderer(top_k=n).render(result), "top_k"),
    "comparison_text": (lambda result, n: text.comparison_text(compare(result, result), "kernel", top=n), "top"),
    "rank_text": (lambda result, n: rank_text(result, top=n), "top"),
}


def _message(name: str, value: object) -> str:
    return rf"^{name} must be None \(every row\) or a positive integer, got {re.escape(repr(value))}$"


@pytest.mark.parametrize("value", NOT_COUNTS, ids=repr)
@pytest.mark.parametrize("table", sorted(TABLES))
def test_a_limit_that_is_not_a_positive_count_raises_naming_it(h200_result, table, value):
    limited, name = TABLES[table]
    with pytest.raises(ValueError, match=_message(name, value)):
        limited(h200_result, value)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_none_keeps_every_row_and_a_positive_count_the_first_that_many(h200_result, table):
    limited, _ = TABLES[table]
    every = limited(h200_result, None).reset_index(drop=True)
    assert len(every) >= 2, "the recording must have rows to cut"
    for n in (1, len(every) - 1, len(every), len(every) + 5, np.int64(1)):
        pd.testing.assert_frame_equal(limited(h200_result, n).reset_index(drop=True), every.head(int(n)))


@pytest.mark.parametrize("value", NOT_COUNTS, ids=repr)
@pytest.mark.parametrize("renderer", sorted(TEXTS))
def test_every_text_renderer_keeps_the_same_rule(h200_result, renderer, value):
    render, name = TEXTS[renderer]
    with pytest.raises(ValueError, match=_message(name, value)):
        render(h200_result, value)
    assert isinstance(render(h200_result, None), str) and isinstance(render(h200_result, 2), str)


def test_a_profiled_cpu_run_keeps_the_rule(demo_result):
    every = demo_result.kernel_rollup()
    assert len(every) >= 2
    pd.testing.assert_frame_equal(demo_result.kernel_rollup(top=len(every) - 1), every.head(len(every) - 1))
    with pytest.raises(ValueError, match=_message("top", -1)):
        demo_result.kernel_rollup(top=-1)  # once all rows but the last
    with pytest.raises(ValueError, match=_message("top_k", -1)):
        demo_result.describe(top_k=-1)
