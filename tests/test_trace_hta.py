"""The trace of the H200 demo result read by HolisticTraceAnalysis (HTA), Kineto's analysis library.

HTA finds GPU kernels by their ``stream`` arg (−1 means CPU), groups them by ``cat`` and takes the
launching op from ``External id`` and ``correlation``; before the Kineto fields were written it
assigned every event to stream −1 and found no kernels. The first test checks those fields
without HTA; the second loads the trace with HTA itself (``pip install HolisticTraceAnalysis``):
it skips where HTA is missing, except under CI (``CI=true``), where scripts/test.sh installs it and
a missing HTA fails the run.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from pathlib import Path

import pytest

from aitune_dispatch.reports import write_perfetto

GPU_CATS = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory, h200_result) -> Path:
    directory = tmp_path_factory.mktemp("hta")
    write_perfetto(h200_result, directory / "rank-0.json.gz")
    return directory


def test_trace_has_the_fields_htas_parser_reads(trace_dir, h200_result):
    result = h200_result
    trace = json.loads(gzip.decompress((trace_dir / "rank-0.json.gz").read_bytes()))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert all(isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["cat"] for e in events)
    gpu = [e for e in events if e["cat"] in GPU_CATS.values()]
    # 78 kernels and 4 memsets in the demo result, every one with Kineto's args
    assert len(gpu) == result.activity.num_rows == 82
    assert sum(e["cat"] == "kernel" for e in gpu) == 78 and sum(e["cat"] == "gpu_memset" for e in gpu) == 4
    activity = result.activity.to_pylist()
    by_correlation = {row["correlation_id"]: row for row in activity}
    for event in gpu:
        args = event["args"]
        row = by_correlation[args["correlation"]]
        assert args["stream"] == row["stream"] >= 0 and args["device"] == row["device"] == 0
        assert args["External id"] == row["op_id"] and event["name"] == row["kernel"]
    ops = {e["args"]["External id"]: e for e in events if e["cat"] == "cpu_op"}
    assert len(ops) == result.ops.num_rows and all(e["args"]["External id"] in ops for e in gpu)
    flows = {}
    for event in trace["traceEvents"]:
        if event["ph"] in ("s", "f"):
            assert event["cat"] == "ac2g"
            flows.setdefault(event["id"], {})[event["ph"]] = event
    assert len(flows) == 82 and all(pair["s"]["ts"] <= pair["f"]["ts"] for pair in flows.values())  # never back


@pytest.mark.filterwarnings("ignore")  # HTA's own pandas deprecation warnings
def test_hta_reads_the_trace_and_breaks_kernels_down(trace_dir):
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("HolisticTraceAnalysis is missing under CI; scripts/test.sh installs it")
        pytest.skip("needs HolisticTraceAnalysis (pip install HolisticTraceAnalysis)")
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = TraceAnalysis(trace_dir=str(trace_dir))
    kinds, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
    assert set(kinds["kernel_type"]) >= {"COMPUTATION"} and kinds["sum"].sum() > 0
    names = set(kernels["name"])
    assert any(name.startswith("fmha_cutlassF") for name in names)  # the attention kernel, by its full name
    idle = analysis.get_idle_time_breakdown(visualize=False)[0]
    assert set(idle["stream"]) == {7}  # the demo ran on one CUDA stream
