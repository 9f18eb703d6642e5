"""A result saved on the H200 (the demo, CUDA source) loads, describes and renders here, without a GPU.

The fixture under tests/data/h200_demo_result/ was written by the current code (schema version 1)
with `aitune-dispatch demo --out ...` on the lent H200 (torch 2.11, CUDA 13.0): every table,
launch records and GPU properties included.
"""

from __future__ import annotations

import json
import subprocess
import sys

from fixture_results import H200_RESULT

from aitune_dispatch.reports import perfetto_events, write_report

SAVED = H200_RESULT


def test_h200_result_loads_and_describes(h200_result):
    result = h200_result
    assert result.source == "cupti/native" and result.metadata["device"] == "cuda"
    kernels = result.activity.column("kernel").to_pylist()
    assert kernels and not any(k.startswith("cpu::") for k in kernels)
    summary = result.describe()
    assert summary["function_name"].iloc[0] == "linear"
    # the summary adds up: shares over all functions sum to 100 %
    assert abs(summary["time_spent_pct"].sum() - 100.0) < 1e-6
    assert 0.9 < result.coverage < 1.0


def test_h200_result_renders_html_and_perfetto(h200_result, tmp_path):
    result = h200_result
    html = write_report(result, tmp_path / "report.html").read_text()
    assert "scaled_dot_product_attention" in html and "cupti/native" in html
    trace = perfetto_events(result)
    gpu_slices = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid", 0) >= 100]
    assert len(gpu_slices) == result.activity.num_rows


def test_h200_result_loads_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import aitune_dispatch\n"
        f"r = aitune_dispatch.load({str(SAVED)!r})\n"
        "print(r.describe()['function_name'].iloc[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "linear"


def test_manifest_names_the_schema_version():
    manifest = json.loads((SAVED / "manifest.json").read_text())
    assert manifest["schema_version"] == 1
