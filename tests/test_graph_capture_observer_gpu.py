"""CUDA graphs captured before profile() on the GPU: observed with observe_graph_captures, attributed later.

Three set-ups a serving user has: a hand-written ``torch.cuda.CUDAGraph`` capture of a module,
``torch.cuda.make_graphed_callables`` on a stack of blocks, and an HF Llama-style model with a static
cache whose decoding step ``generate()`` compiles with ``mode="reduce-overhead"``, warmed before
``generate()`` is profiled (in a process of its own: ``tests/static_cache_decoding.py``). For each,
the replayed kernels' (module, function, op, kernel) rows must be the rows the same graphs get when
they are captured inside ``profile()``, and the replayed kernel multiset must be what an
uninstrumented CUPTI capture of the same replays launched. The observer needs CUPTI's callback
subscription, which torch.profiler keeps once it has run in a process, so the observed tests run in
fresh processes. Marked ``gpu_compile`` too: the Llama test compiles with Inductor.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from fixture_models import cuda_mlp as mlp
from fixture_models import run_unprofiled as run
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, schema
from aitune_dispatch.provenance import observer as graph_observer
from aitune_dispatch.provenance.inductor import forget_programs
from benchmarks.zoo import Graphed

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_compile, pytest.mark.single_backend]


@pytest.fixture(autouse=True)
def fresh_state():
    """Each test compiles from scratch and starts with no observation of another test's graphs."""
    torch._dynamo.reset()
    forget_programs()
    graph_observer.forget_observations()
    yield
    torch._dynamo.reset()
    forget_programs()
    graph_observer.forget_observations()


FRESH = "AITUNE_DISPATCH_TEST_FRESH_PROCESS"


def in_a_fresh_process(request: pytest.FixtureRequest) -> bool:
    """True in a fresh process; elsewhere, runs this test in a fresh pytest process, asserts it passed, False.

    The observer needs CUPTI's one callback subscription, which torch.profiler's Kineto keeps once it
    has run in a process (other GPU tests run it; the observer then says so in ``unavailable``).
    """
    if os.environ.get(FRESH) == "1":
        return True
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid],
        cwd=request.config.rootpath,
        env={**os.environ, FRESH: "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    return False


def replayed(result) -> pd.DataFrame:  # noqa: ANN001
    """The rows of kernels launched by CUDA graph replays."""
    activity = result.to_pandas()
    return activity[activity["graph_id"] != schema.NOT_IN_GRAPH]


def row_multiset(rows: pd.DataFrame) -> collections.Counter:
    """(module, function, op, kernel) of every row, a missing value as None."""
    keys = rows[["module_name", "function_name", "op", "kernel"]].astype(object)
    keys = keys.where(keys.notna(), None)
    return collections.Counter(map(tuple, keys.itertuples(index=False)))


def check_observed_replays(observed, inside, bare: collections.Counter, graph_attribution: set[str]) -> None:  # noqa: ANN001
    """Replays of graphs captured before profile() under the observer get the rows of a capture inside it."""
    before, reference = replayed(observed), replayed(inside)
    assert len(reference) > 0, "the reference pass replayed no CUDA graph"
    assert len(before) > 0, "the profiled pass replayed no CUDA graph"
    assert set(reference["attribution"]) <= graph_attribution, set(reference["attribution"])
    assert set(before["attribution"]) <= graph_attribution, before[["attribution", "op", "kernel"]]
    assert schema.GRAPH_LAUNCH_OP not in set(before["op"])
    assert row_multiset(before) == row_multiset(reference)
    assert collections.Counter(before["kernel"]) == bare
    assert not [w for w in observed.warnings if "CUDA graphs" in w], observed.warnings
    assert "captured before profile()" in observed.metadata[schema.META_GRAPH_CAPTURE]
    replays = observed.graph_replays()
    assert len(replays) > 0 and bool((replays["attributed"] == 1.0).all()), replays


# -- a hand-written capture ------------------------------------------------------------------------
def test_a_module_captured_by_hand_before_profile_is_attributed_as_if_captured_inside_it(bare_kernels, request):
    if not in_a_fresh_process(request):
        return
    inner, samples = mlp()
    example = samples[0][0][0]
    inside_graphed = Graphed(inner, example)  # captured in profile()'s warm-up
    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(inside_graphed, samples, warmup_iterations=1)
    inside = profiler.last_result
    assert inside.metadata[schema.META_GRAPH_CAPTURE] == "observed"

    graphed = Graphed(inner, example)
    original = torch.cuda.CUDAGraph.capture_begin
    with aitune_dispatch.observe_graph_captures(graphed) as observer:
        assert torch.cuda.CUDAGraph.capture_begin is not original
        run(graphed, samples[:1])  # the capture, at "start-up"
    assert torch.cuda.CUDAGraph.capture_begin is original and not observer.active
    assert (observer.captured, observer.unavailable) == (1, None)
    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(graphed, samples, warmup_iterations=1)
    observed = profiler.last_result
    check_observed_replays(
        observed, inside, bare_kernels(graphed, samples, graphed_only=True), {schema.ATTRIBUTION_GRAPH_CAPTURE}
    )
    rows = replayed(observed)
    assert set(rows.loc[rows["function_name"] == "linear", "module_name"]) == {"inner.0", "inner.2"}
    assert rows["call_id"].nunique() == 2 * 3  # two replays of three functional calls
    # the whole pass is what an unprofiled one runs, the copies into the static input included
    assert collections.Counter(observed.to_pandas()["kernel"]) == bare_kernels(graphed, samples)

    assert len(graph_observer.observations()) == 1
    graphed.graph = None  # the CUDAGraph freed: what was observed of it goes with it
    gc.collect()
    assert graph_observer.observations() == []


def test_a_graph_captured_before_profile_with_no_observer_gets_per_graph_totals_and_a_warning(bare_kernels):
    inner, samples = mlp()
    graphed = Graphed(inner, samples[0][0][0])
    run(graphed, samples[:1])
    profiler = ModuleFunctionKernelProfiler()
    with pytest.warns(RuntimeWarning, match="observe_graph_captures"):
        profiler.profile(graphed, samples, warmup_iterations=1)
    result = profiler.last_result
    replays = result.graph_replays()
    assert len(replays) == 1, replays
    row = replays.iloc[0]
    assert row["replays"] == 2 and row["attributed"] == 0.0
    assert row["kernels"] == sum(bare_kernels(graphed, samples, graphed_only=True).values())
    assert row["total_us"] == pytest.approx(replayed(result)["kernel_us"].sum())


# -- make_graphed_callables ------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def block_stack() -> tuple[nn.Sequential, list]:
    torch.manual_seed(0)
    stack = nn.Sequential(Block(64), Block(64), Block(64)).cuda().eval()
    generator = torch.Generator().manual_seed(1)
    samples = [((torch.randn(16, 64, generator=generator).cuda(),), {}) for _ in range(2)]
    return stack, samples


def graph_blocks(stack: nn.Sequential, example: torch.Tensor) -> None:
    """Each block's forward replaced by its graphed one (make_graphed_callables needs autograd on)."""
    with torch.enable_grad():
        torch.cuda.make_graphed_callables(tuple(stack), tuple((example,) for _ in stack))


def test_blocks_graphed_by_make_graphed_callables_before_profile_are_attributed_as_if_graphed_inside_it(
    bare_kernels, request
):
    if not in_a_fresh_process(request):
        return
    stack, samples = block_stack()
    example = samples[0][0][0]
    first = [True]

    def graphs_on_first_call(x: torch.Tensor) -> torch.Tensor:
        if first[0]:
            first[0] = False
            graph_blocks(stack, example)
        return stack(x)

    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(graphs_on_first_call, samples, module=stack, warmup_iterations=1)
    inside = profiler.last_result

    stack, samples = block_stack()
    example = samples[0][0][0]
    with aitune_dispatch.observe_graph_captures(stack) as observer:
        graph_blocks(stack, example)
    assert observer.captured >= len(stack), (observer.captured, observer.unavailable)  # forward and backward graphs
    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(stack, samples, warmup_iterations=1)
    observed = profiler.last_result
    check_observed_replays(
        observed, inside, bare_kernels(stack, samples, graphed_only=True), {schema.ATTRIBUTION_GRAPH_CAPTURE}
    )
    rows = replayed(observed)
    linear = rows[rows["function_name"] == "linear"]
    assert set(linear["module_name"]) == {f"{b}.{fc}" for b in range(3) for fc in ("fc1", "fc2")}
    assert set(rows.loc[rows["function_name"] == "layer_norm", "module_name"]) == {"0.norm", "1.norm", "2.norm"}


# -- HF Llama-style static-cache decoding, compiled with reduce-overhead -------------------------------
@pytest.fixture(scope="module")
def static_cache_decoding() -> dict:
    """``tests/static_cache_decoding.py``'s figures, run once in a process of its own."""
    pytest.importorskip("transformers")
    script = Path(__file__).with_name("static_cache_decoding.py")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {done.stderr[-4000:]}"
    if os.environ.get("OUT"):  # benchmarks/gpu_run.sh's work folder: the figures for RESULTS.md
        Path(os.environ["OUT"], "static_cache_decoding.json").write_text(lines[-1][len("RESULT ") :])
    return json.loads(lines[-1][len("RESULT ") :])


def test_static_cache_llama_compiled_with_reduce_overhead_and_warmed_before_profile_is_attributed(
    static_cache_decoding,
):
    """Start-up under the observer, then generate() profiled: the replayed rows of a capture inside profile().

    Dynamo guards on the torch-function-mode stack, so profile()'s warm-ups recompile the decoding step
    under its modes and capture it again (docs/compiled.md): the replays are attributed either way,
    from the observer's record or from that capture, and must equal the reference's rows exactly.
    """
    out = static_cache_decoding
    inside, observed = out["inside"], out["observed"]
    assert out["observer"]["captured"] > 0 and out["observer"]["unavailable"] is None, out["observer"]
    assert inside["rows"], "the reference pass replayed no CUDA graph (did generate() compile its decoding step?)"
    assert observed["rows"] == inside["rows"]
    assert observed["attribution"] == inside["attribution"]  # kernels per attribution, as the reference's
    assert observed["kernels"] == out["bare"]
    assert out["observed_tokens"] == out["inside_tokens"]
    graph_warnings = [[w for w in r["warnings"] if "CUDA graphs" in w] for r in (observed, inside)]
    assert graph_warnings[0] == graph_warnings[1], graph_warnings


def test_static_cache_llama_decoding_kernels_get_their_modules(static_cache_decoding):
    """generate() compiles ``model.__call__``: the hooks run compiled, so no scope is on the stack while
    its graphs are captured; Inductor's call sites name the modules of every replayed kernel."""
    observed = static_cache_decoding["observed"]
    assert schema.ATTRIBUTION_GRAPH_LAUNCH not in observed["attribution"], observed["attribution"]
    assert any(m.startswith("model.layers.1.") for m in observed["modules"]), observed["modules"]
    assert "lm_head" in observed["linear_modules"], observed["linear_modules"]
