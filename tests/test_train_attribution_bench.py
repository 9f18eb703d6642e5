"""``benchmarks/train_attribution.py``: the shares add up (forward + backward + optimizer = attributed) and
follow the rows' attribution, and a CPU smoke run records a training loop (no share is asserted beyond
what the rows say)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from benchmarks import train_attribution


def test_the_shares_follow_the_rows():
    activity = pd.DataFrame(
        {
            "kernel_us": [10.0, 20.0, 30.0, 40.0],
            "attribution": ["trace", "backward", "optimizer", "trace"],
            "module_id": [0, 1, -1, -1],
            "call_id": [0, -1, 2, -1],
            "op": ["aten::addmm", "aten::mm", "aten::_fused_adamw_", "aten::ones_like"],
        }
    )
    shares = train_attribution.shares(activity, np.array([0, 0, 1, 1]))
    assert shares["attributed"] == pytest.approx(0.6)
    assert (shares["forward"], shares["backward"], shares["optimizer"]) == pytest.approx((0.1, 0.2, 0.3))
    assert shares["module_and_call"] == pytest.approx(0.1)
    assert shares["per_step"] == pytest.approx([1.0, 30 / 70])
    assert shares["rest"] == [("aten::ones_like", pytest.approx(0.4))]


def test_a_cpu_run_records_forward_backward_and_optimizer(tmp_path):
    argv = ["--out", str(tmp_path), "--models", "mlp", "--steps", "2", "--device", "cpu"]
    assert train_attribution.main(argv) == 0
    (row,) = json.loads((tmp_path / "train_attribution.json").read_text())["rows"]
    assert row["forward"] > 0 and row["backward"] > 0 and row["optimizer"] > 0
    assert row["forward"] + row["backward"] + row["optimizer"] == pytest.approx(row["attributed"])
    assert len(row["per_step"]) == 2
    assert "| mlp | cpu | 2 |" in (tmp_path / "train_attribution.md").read_text()
