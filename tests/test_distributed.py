"""Two ranks under torch.distributed (gloo, CPU): per-rank results, merge, the rank view, the report.

One job per test module: two processes started as torchrun would (``tests/distributed_job.py``;
rendezvous and gloo traffic on 127.0.0.1 only, bounded by a timeout), each profiling its own pass
once per tracing backend and saving its result. Rank ``r`` runs ``r + 1`` linear layers, an
all-reduce inside the ``sync`` module and a relu, on two samples (4 and 2 rows).
"""

from __future__ import annotations

import collections
import json
import socket
from pathlib import Path

import pytest
from distributed_job import launch

import aitune_dispatch
from aitune_dispatch import cli, encoded, schema
from aitune_dispatch.reports import perfetto_events, write_report
from aitune_dispatch.reports.perfetto import RANK_PID_STRIDE
from aitune_dispatch.results import collectives, compare_ranks, function_ranks, load, rank_summary, select_rank
from aitune_dispatch.tracing import native

pytestmark = pytest.mark.single_backend  # each rank profiles once per backend, in one job
TRACERS = ["native", "python"] if native.available() else ["python"]
SAMPLES = 2


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gloo_job")
    launch(out, device="cpu", tracers=",".join(TRACERS), timeout_s=240)
    return out


@pytest.fixture(params=TRACERS)
def tracer(request: pytest.FixtureRequest) -> str:
    return request.param


def _facts(job: Path, rank: int) -> dict:
    return json.loads((job / f"rank{rank}.json").read_text())


def test_each_rank_names_itself(job, tracer):
    for rank in (0, 1):
        result = load(job / tracer / f"rank{rank}")
        assert result.metadata["rank"] == str(rank) and result.metadata["world_size"] == "2"
        assert result.metadata["host"] == socket.gethostname()
        assert result.metadata["distributed_backend"] == "gloo" and result.metadata["local_rank"] == str(rank)
        assert result.metadata["tracer"] == tracer
        # rank r has r + 1 linear layers
        assert result.modules["module_type"].to_pylist().count("Linear") == rank + 1


def test_each_rank_ran_as_without_the_profiler(job, tracer):
    for rank in (0, 1):
        result, facts = load(job / tracer / f"rank{rank}"), _facts(job, rank)
        assert collections.Counter(result.ops["op"].to_pylist()) == facts["bare"]
        # linear on CPU is aten::t + aten::addmm: (r + 1) layers x 2 samples x 2 ops
        assert facts["bare"]["aten::addmm"] == (rank + 1) * SAMPLES
        assert facts["output_sum_after"] == facts["output_sum"]  # nothing stayed installed
        # profiling keeps no reference to the process group: destroy_process_group can still end it
        assert len(set(facts["group_references"])) == 1, facts["group_references"]


def test_the_collective_is_attributed_to_its_module_and_op(job, tracer):
    for rank in (0, 1):
        result = load(job / tracer / f"rank{rank}")
        rows = encoded.decoded(result.activity).to_pandas()
        reduce = rows[rows["op"] == "c10d::allreduce_"]
        assert len(reduce) == SAMPLES  # one all-reduce per sample
        assert set(reduce["module_name"]) == {"sync"} and set(reduce["kernel"]) == {"cpu::c10d::allreduce_"}
        assert reduce["function_name"].isna().all()  # no torch.nn.functional call encloses it
        assert rows["op_id"].notna().all() and (rows["module_id"] >= 0).all()  # every row attributed to a module


def test_the_directory_of_ranks_loads_as_their_merge(job, tracer):
    merged = aitune_dispatch.load(job / tracer)
    ranks = [load(job / tracer / f"rank{rank}") for rank in (0, 1)]
    assert merged.metadata[schema.MERGED_RANKS_KEY] == "0,1" and merged.metadata["world_size"] == "2"
    assert merged.activity.num_rows == sum(r.activity.num_rows for r in ranks)
    assert merged.activity["rank"].to_pylist() == [0] * ranks[0].activity.num_rows + [1] * ranks[1].activity.num_rows
    summary = merged.describe().set_index("function_name")
    # linear: rank 0 one layer, rank 1 two, on 2 samples each -> 2 + 4 calls; the two shapes are
    # the same on both ranks (and for both of rank 1's layers) -> 2 distinct samples
    assert summary.loc["linear", "calls"] == 2 + 4 and summary.loc["linear", "num_distinct_samples"] == 2
    assert summary.loc["relu", "calls"] == 2 + 2
    by_rank = merged.describe(by="rank").set_index(["rank", "function_name"])
    assert by_rank.loc[(0, "linear"), "calls"] == 2 and by_rank.loc[(1, "linear"), "calls"] == 4
    assert by_rank.loc[(1, "linear"), "num_modules"] == 2
    for rank, original in enumerate(ranks):
        assert select_rank(merged, rank).describe().equals(original.describe())


def test_the_rank_view(job, tracer):
    merged = aitune_dispatch.load(job / tracer)
    ranks = [load(job / tracer / f"rank{rank}") for rank in (0, 1)]
    times = [r.describe().set_index("function_name")["time_spent_us"] for r in ranks]
    view = function_ranks(merged).set_index("function_name")
    for name in ("linear", "relu"):
        per_rank = [float(t[name]) for t in times]
        assert view.loc[name, "mean_us"] == pytest.approx(sum(per_rank) / 2)
        assert view.loc[name, "max_us"] == max(per_rank) and view.loc[name, "min_us"] == min(per_rank)
        assert view.loc[name, "slowest_rank"] == per_rank.index(max(per_rank)) and view.loc[name, "ranks"] == 2
    summary = rank_summary(merged)
    assert list(summary["activity_rows"]) == [r.activity.num_rows for r in ranks]
    assert list(summary["host"]) == [socket.gethostname()] * 2
    for rank, original in enumerate(ranks):
        rows = encoded.decoded(original.activity).to_pandas()
        reduce_us = rows.loc[rows["op"] == "c10d::allreduce_", "kernel_us"].sum()
        assert summary.loc[rank, "collective_us"] == pytest.approx(reduce_us)
    reduce = collectives(merged)
    assert list(reduce["rank"]) == [0, 1] and list(reduce["calls"]) == [SAMPLES, SAMPLES]
    assert set(reduce["module_name"]) == {"sync"} and set(reduce["op"]) == {"c10d::allreduce_"}
    comparison = compare_ranks(merged, 0, 1)
    linear = comparison[(comparison["level"] == "function") & (comparison["function_name"] == "linear")].iloc[0]
    # CPU rows per linear call: aten::t + aten::addmm -> rank 0: 2 calls x 2, rank 1: 4 calls x 2
    assert (linear.before_kernels, linear.after_kernels) == (4, 8)


def test_the_report_and_the_trace(job, tracer, tmp_path):
    merged = aitune_dispatch.load(job / tracer)
    page = write_report(merged, tmp_path / "job.html").read_text()
    section = page[page.index('<section id="ranks">') : page.index("</section>", page.index('<section id="ranks">'))]
    assert section.count("<tr>") == 1 + 2 + 1 + 2 + 1 + 2  # ranks, functions (linear, relu), collectives
    trace = perfetto_events(merged)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    host = socket.gethostname()
    assert names == {1: f"rank 0 CPU ({host})", RANK_PID_STRIDE + 1: f"rank 1 CPU ({host})"}
    for rank in (0, 1):
        own = load(job / tracer / f"rank{rank}")
        ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "cpu_op"]
        assert sum(e["pid"] == rank * RANK_PID_STRIDE + 1 for e in ops) == own.ops.num_rows


def test_the_command_line(job, tracer, capsys):
    assert cli.main(["ranks", str(job / tracer)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "per rank (2 ranks merged):"
    assert "linear" in out and "relu" in out
    assert cli.main(["ranks", str(job / tracer), "--compare", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert "rank 0 vs rank 1" in out and "per function, largest change first" in out
    assert cli.main(["report", str(job / tracer)]) == 0
    assert "per rank (2 ranks merged):" in capsys.readouterr().out
