"""benchmarks/capture_breakdown.py without a GPU: torch's capture methods are put back; its table."""

from __future__ import annotations

import pytest
import torch

from benchmarks import capture_breakdown


def test_torch_capture_methods_are_timed_while_entered_and_put_back():
    graph_class = torch.cuda.CUDAGraph
    before = {name: graph_class.__dict__.get(name) for name in ("capture_begin", "capture_end")}
    laps: dict[str, float] = {}
    with pytest.raises(ValueError), capture_breakdown.timed_capture_methods(laps):
        assert graph_class.__dict__.get("capture_begin") is not before["capture_begin"]
        raise ValueError("the capture failed")
    assert {name: graph_class.__dict__.get(name) for name in before} == before


def _variant(capture: float, begin: float = 0.0, end: float = 0.0) -> dict[str, float]:
    return {
        "capture_ms": capture, "capture_min_ms": capture - 0.1, "capture_max_ms": capture + 0.2,
        "torch capture_begin": 0.38, "torch capture_end": 0.16, "observer begin": begin, "observer end": end,
    }  # fmt: skip


def test_the_table_has_a_row_per_variant_with_its_excess_over_bare():
    results = [
        {
            "model": "mlp",
            "variants": {
                "bare": _variant(1.6),
                "observed": _variant(2.2, 0.32, 0.15),
                "subscription only": _variant(1.65, 0.04, 0.03),
                "tracing only": _variant(2.1, 0.31, 0.11),
            },
        },
        {"model": "unet_sd15", "status": "skipped", "reason": "diffusers is not installed"},
    ]
    text = capture_breakdown.render(results)
    rows = [line for line in text.splitlines() if line.startswith("| mlp |")]
    assert [row.split(" | ")[1] for row in rows] == list(capture_breakdown.VARIANTS)
    observed = rows[1].split(" | ")
    assert observed[2] == "2.200 (2.100–2.400)" and observed[3] == "+0.600"
    assert observed[6:8] == ["0.320", "0.150 |"]
    assert rows[0].split(" | ")[3] == "+0.000" and rows[0].endswith("| – | – |")  # bare: no observer
    assert "| unet_sd15 | – | skipped: diffusers is not installed |" in text
