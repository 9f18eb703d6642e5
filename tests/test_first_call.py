"""A one-shot profile loads only what it uses: no torch._dynamo / torch._inductor for an eager model.

Each test runs in a fresh interpreter (what a notebook cell or a CLI run starts with), since the
suite's own process has long imported the compiler stack.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(code: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_COMPILER = """
import sys
def compiler_modules():
    return sorted(m for m in sys.modules if m.split(".")[:2] in (["torch", "_dynamo"], ["torch", "_inductor"]))
"""


def test_importing_and_profiling_an_eager_model_loads_no_compiler(tracing_backend):
    report = _run(
        _COMPILER
        + f"""
import json, torch
from torch import nn
import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, describe_results
after_import = compiler_modules()

class Block(nn.Module):  # a functional, a fast-path-gated module and a nested functional call
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.fc = nn.Linear(16, 16)
    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(self.attn(x, x, x, need_weights=False)[0]))

model = Block().eval()
profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer={tracing_backend!r})
frame, function_data = profiler.profile(model, [((torch.randn(2, 4, 16),), {{}})], warmup_iterations=1)
describe_results(frame, function_data)
profiler.last_result.samples()
from aitune_dispatch.tracing import dispatch
print(json.dumps({{
    "after_import": after_import, "after_profile": compiler_modules(), "rows": len(frame),
    "functions": sorted(set(frame["function_name"])), "skipped": dispatch.OpMode._frames_skipped,
    "tracer": profiler.last_result.metadata["tracer"],
}}))
"""
    )
    assert report["tracer"] == tracing_backend
    assert report["rows"] > 0 and {"linear", "gelu"} <= set(report["functions"])  # it did record the pass
    assert report["after_import"] == []
    assert report["after_profile"] == []
    # the pure backend's dispatch handler is still hidden from Dynamo, without importing it
    assert report["skipped"] is True


def _compiled_inside(tracing_backend: str, preload: bool) -> dict:
    """Profile a model that calls ``torch.compile`` on its first forward, in a fresh interpreter
    (``preload``: with Dynamo and Inductor imported first, as after any earlier compile)."""
    return _run(
        _COMPILER
        + f"""
import json, warnings, torch
from torch import nn
from aitune_dispatch import ModuleFunctionKernelProfiler, schema
if {preload!r}:
    import torch._dynamo, torch._inductor.debug

class CompilesOnFirstCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
        self.compiled = None
    def forward(self, x):
        if self.compiled is None:
            self.compiled = torch.compile(self.net)
        return self.compiled(x)

model = CompilesOnFirstCall().eval()
meta_path = list(sys.meta_path)
before = compiler_modules()
profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer={tracing_backend!r})
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch: global hooks also see the OptimizedModule
    frame, _ = profiler.profile(model, [((torch.randn(4, 16),), {{}})], warmup_iterations=1)
import torch._inductor.debug as debug, torch._inductor.config as config, torch._functorch.config as fconfig
from aitune_dispatch.provenance import inductor as provenance
hook = debug.set_kernel_post_grad_provenance_tracing
holders = [m for n, m in list(sys.modules.items()) if n.startswith("torch._inductor") and m is not None]
result = profiler.last_result
print(json.dumps({{
    "before": before,
    "activity": result.activity.select(["kernel", "op", "module_name", "function_name", "attribution"]).to_pylist(),
    "status": result.metadata[schema.META_INDUCTOR],
    "meta_path_restored": list(sys.meta_path) == meta_path,
    "hook_restored": not hasattr(hook, "__wrapped__")
    and all(getattr(m, provenance.HOOK, hook) is hook for m in holders),
    "loader_restored": type(debug.__loader__).__module__ != "aitune_dispatch.tracing.import_watch",
    "caches": [config.fx_graph_cache, fconfig.enable_autograd_cache],
}}))
"""
    )


def test_a_model_compiled_inside_the_profiled_function_is_observed_as_when_inductor_was_loaded(tracing_backend):
    """``torch.compile`` called on the first forward loads Dynamo and Inductor inside the warm-up pass:
    the profiler attaches to Inductor as it loads (its 3 kernel call sites are seen), records what it
    records when Inductor was loaded before ``profile()``, and removes itself afterwards."""
    from aitune_dispatch import torch_compat

    if not torch_compat.provenance_tracing_available():
        pytest.skip(f"this torch's Inductor has no {torch_compat.PROVENANCE_HOOK} outside its debug trace")
    fresh, preloaded = _compiled_inside(tracing_backend, False), _compiled_inside(tracing_backend, True)
    assert fresh["before"] == []  # nothing of the compiler was loaded when profile() began
    assert preloaded["before"] != []
    for report in (fresh, preloaded):
        assert report["status"].startswith("observed: 3 kernel call sites of 1 graphs compiled in this profile()")
        assert [row["op"] for row in report["activity"]] == ["aten::addmm", "aten::addmm"]  # the two extern calls
        assert report["meta_path_restored"] and report["hook_restored"] and report["loader_restored"]
        assert report["caches"] == [True, True]  # torch's defaults again: bypassed only while profile() ran
    assert fresh["activity"] == preloaded["activity"]


def test_importing_the_package_or_the_cli_loads_no_rich():
    """rich draws the CLI's tables and bar; it is imported where they are drawn, not at import."""
    report = _run(
        """
import json, sys
import aitune_dispatch
after_package = "rich" in sys.modules
from aitune_dispatch import cli
print(json.dumps({"package": after_package, "cli": "rich" in sys.modules}))
"""
    )
    assert report == {"package": False, "cli": False}
