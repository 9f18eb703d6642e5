"""The native op tracer (C++ RecordFunction callback) records what the Python dispatch mode records.

Both tracers profile the same models; their rows (module, function, op, kernel) and op tables
(op names, enclosing module and functional call, in order) must be equal. The tracer must leave
nothing installed, also when the pass raises. Where the extension is not built these tests skip,
except under CI (``CI`` set), where scripts/setup.sh must have built it.
"""

from __future__ import annotations

import collections
import os
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, backends, encoded
from aitune_dispatch.demo import demo_workload
from aitune_dispatch.tracing import native
from benchmarks import zoo

if not native.available():
    if os.environ.get("CI"):
        native.load()  # fails with the build fix: CI must test the default tracer
    pytest.skip("native tracer not built (python setup.py build_ext --inplace)", allow_module_level=True)

pytestmark = pytest.mark.single_backend  # each test names the backends it compares

ROW_KEY = ["module_name", "function_name", "op", "kernel"]
# under a dispatch mode aten::reshape takes its tensor-subclass branch and dispatches aten::view
# (no kernel either way); the native tracer sees what runs without one
UNDER_DISPATCH_MODE = {"aten::_reshape_alias": "aten::view"}


def _profile(model, samples, tracer, warmup=1, **kwargs):
    profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer=tracer, **kwargs)
    profiler.profile(model, samples, warmup_iterations=warmup)
    return profiler.last_result


def _rows(result) -> collections.Counter:
    frame = result.profiling_df()
    frame = frame.assign(
        op=frame.op.replace(UNDER_DISPATCH_MODE), kernel=frame.kernel.str.replace("_reshape_alias", "view")
    )
    return collections.Counter(map(tuple, frame[ROW_KEY].astype(str).values))


def _op_sequence(result) -> list[tuple]:
    ops = encoded.decoded(result.ops).to_pandas()
    calls = encoded.decoded(result.calls).to_pandas().set_index("call_id")["function_name"].to_dict()
    return [
        (UNDER_DISPATCH_MODE.get(op, op), module, calls.get(call))
        for op, module, call in zip(ops.op, ops.module_id, ops.call_id)
    ]


class _Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.norm = nn.BatchNorm2d(4).eval()

    def forward(self, x):
        y = F.relu(self.norm(self.conv(x)))
        return F.adaptive_avg_pool2d(F.max_pool2d(y, 2), 1).flatten(1).softmax(-1)


def _workloads():
    yield "demo", *demo_workload("cpu")
    for name in ("mlp", "sdpa_blocks", "mha_blocks", "gpt2"):
        try:
            work = zoo.build(name, "cpu", 2, size="small")
        except zoo.ModelUnavailable:
            continue
        yield name, work.model, work.samples
    model = _Conv().eval()
    yield "conv", model, [((torch.randn(2, 3, 12, 12),), {})]


@pytest.mark.parametrize("name,model,samples", list(_workloads()), ids=lambda v: v if isinstance(v, str) else "")
def test_native_and_python_tracers_record_the_same_ops(name, model, samples):
    python = _profile(model, samples, "python")
    native = _profile(model, samples, "native")
    assert native.metadata["tracer"] == "native" and python.metadata["tracer"] == "python"
    assert len(native.ops) > 0
    assert _op_sequence(native) == _op_sequence(python)
    assert _rows(native) == _rows(python)
    ops = encoded.decoded(native.ops).to_pandas()
    assert (ops.end_ns >= ops.start_ns).all() and (ops.start_ns > 0).all()
    assert ops.thread.nunique() == 1 and ops.thread.iloc[0] >= 0


def test_native_is_the_default_where_built():
    assert backends.default_tracer() == "native"
    assert ModuleFunctionKernelProfiler(device="cpu").op_tracer == "native"


def test_decompositions_go_to_the_ops_they_dispatch():
    def run(x, w):
        return F.linear(x, w).reshape(-1).sum()

    class Wrap(nn.Module):
        def forward(self, x, w):
            return run(x, w)

    result = _profile(Wrap(), [((torch.randn(2, 4), torch.randn(3, 4)), {})], "native")
    ops = encoded.decoded(result.ops).to_pandas()
    # CompositeImplicitAutograd ops are never recorded, the ops they decompose into are
    assert not {"aten::linear", "aten::matmul", "aten::reshape"} & set(ops.op)
    calls = encoded.decoded(result.calls).to_pandas().set_index("call_id").function_name
    under_linear = set(ops[ops.call_id.map(calls) == "linear"].op)
    assert under_linear in ({"aten::t", "aten::mm"}, {"aten::t", "aten::addmm"}), under_linear


@torch.library.custom_op("nc_test::scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    """A custom op with a Python kernel (torch 2.15 calls it through its PyObject fast path)."""
    return x * 2


def _fast_path_on() -> bool | None:
    """Whether torch 2.15's custom-op fast path is on for ``nc_test::scale``; None on torches without it."""
    enabled = getattr(_scale._opoverload, "_is_pyobj_dispatcher_enabled", None)
    return None if enabled is None else enabled()


@pytest.mark.parametrize("tracer", ["native", "python"])
def test_a_custom_op_is_named_by_its_own_name(tracer):
    class Scales(nn.Module):
        def forward(self, x):
            return _scale(x).sum()

    before = _fast_path_on()
    result = _profile(Scales(), [((torch.randn(2, 4),), {})], tracer)
    ops = list(encoded.decoded(result.ops).to_pandas().op)
    # the op itself, not the aten::mul of its kernel (which runs inside it, unseen)
    assert "nc_test::scale" in ops and "aten::mul" not in ops, ops
    assert _fast_path_on() == before  # the pass leaves torch's dispatch of custom ops as it found it


def _bare_op_names(function, *args) -> collections.Counter:
    """Every op one bare call runs, as torch.profiler's RecordFunction events name them (no mode)."""
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        function(*args)
    return collections.Counter(event.name for event in prof.events() if event.name.startswith("aten::"))


def test_the_native_tracer_runs_what_the_bare_pass_runs_where_a_dispatch_mode_would_not():
    # README, "the pure-Python backend's dispatch mode is the cause": under any TorchDispatchMode
    # linear's matmul path adds its bias out of place, and a fused C++ op's inner ops skip autocast
    linear = nn.Linear(16, 16)
    strided = torch.randn(5, 2, 16).transpose(0, 1)  # not foldable into one addmm: the matmul path
    assert _bare_op_names(linear, strided)["aten::add_"] == 1  # the bare pass adds in place
    native_ops, python_ops = (
        collections.Counter(_profile(linear, [((strided,), {})], tracer, warmup=0).ops.column("op").to_pylist())
        for tracer in ("native", "python")
    )
    assert native_ops["aten::add_"] == 1 and "aten::add" not in native_ops
    assert python_ops["aten::add"] == 1 and "aten::add_" not in python_ops  # the dispatch mode's effect

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    outputs = []

    def autocast(inputs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs.append(layer(inputs))

    with torch.no_grad():
        autocast(x)
    for tracer, dtype in (("native", outputs[0].dtype), ("python", torch.float32)):
        profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer=tracer)
        profiler.profile(autocast, [((x,), {})], module=layer, warmup_iterations=0)
        assert outputs[-1].dtype == dtype, tracer
    assert outputs[0].dtype == torch.bfloat16
    assert torch.equal(outputs[1], outputs[0])  # native: the same output as the bare pass


class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize("error", [_Boom, KeyboardInterrupt])
def test_nothing_stays_installed_when_the_pass_raises(error):
    native_module = native.load()

    class Failing(nn.Module):
        def forward(self, x):
            F.relu(x)
            raise error("stop")

    with pytest.raises(error):
        _profile(Failing(), [((torch.randn(3),), {})], "native", warmup=0)  # raises in the recorded pass
    assert not native_module.running()
    assert not torch._C._len_torch_function_stack()
    # the thread's next ops are not recorded: a new pass starts from an empty table
    torch.relu(torch.randn(3))
    result = _profile(nn.ReLU(), [((torch.randn(3),), {})], "native")
    assert result.ops.column("op").to_pylist() == ["aten::relu"]  # the warmup pass is not recorded
    assert not native_module.running()


def test_ops_of_other_threads_are_not_recorded():
    done = threading.Event()

    def other():
        while not done.is_set():
            torch.exp(torch.ones(2))

    class Model(nn.Module):
        def forward(self, x):
            for _ in range(50):
                x = F.gelu(x)
            return x

    thread = threading.Thread(target=other)
    thread.start()
    try:
        result = _profile(Model(), [((torch.randn(4),), {})], "native")
    finally:
        done.set()
        thread.join()
    assert collections.Counter(result.ops.column("op").to_pylist()) == {"aten::gelu": 50}


def test_a_second_tracer_cannot_start_while_one_records():
    first = native.NativeTracer([], None, -1)
    first.__enter__()
    try:
        with pytest.raises(RuntimeError, match="already"):
            native.NativeTracer([], None, -1).__enter__()
    finally:
        first.__exit__(None, None, None)
    assert not native.load().running()
    assert not torch._C._len_torch_function_stack()


def test_an_ended_tracer_decodes_what_a_pass_took():
    # NativeTracer.ended: what benchmarks/post_memory.py builds from synthetic rows instead of
    # reaching into a tracer; it must read a take() exactly as the tracer that recorded it
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    modules = [(model, 0), (model[0], 1), (model[1], 2)]
    recorded = native.NativeTracer(modules, None, native.LOG_PUSHES)
    with recorded:
        model(torch.randn(2, 4))
    ended = native.NativeTracer.ended(modules, recorded._columns())
    got, want = ended.tables(), recorded.tables()
    for name in ("ops", "calls", "module_calls", "contexts"):
        assert getattr(got, name).equals(getattr(want, name)), name
    assert got.ops.num_rows > 0 and got.calls.num_rows > 0
    assert ended.push_log() == recorded.push_log()
    assert ended.function_data() == recorded.function_data()
    with pytest.raises(RuntimeError, match="one pass"):
        ended.__enter__()
    assert not native.load().running()


def test_unknown_tracer_is_refused():
    with pytest.raises(ValueError, match="op_tracer"):
        ModuleFunctionKernelProfiler(device="cpu", op_tracer="cpp")


def test_a_tracer_built_for_another_torch_is_refused(monkeypatch):
    from aitune_dispatch.tracing import _tracer

    monkeypatch.setattr(_tracer, "torch_version", "0.0.0-other")
    backends.default_tracer.cache_clear()
    try:
        with pytest.raises(ImportError, match="built for torch 0.0.0-other"):
            native.load()
        assert not native.available()
        with pytest.warns(RuntimeWarning, match="built for torch 0.0.0-other.*pure-Python backend"):
            assert ModuleFunctionKernelProfiler(device="cpu").op_tracer == "python"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per process
            assert ModuleFunctionKernelProfiler(device="cpu").op_tracer == "python"
        with pytest.raises(ImportError, match="built for torch 0.0.0-other"):
            ModuleFunctionKernelProfiler(device="cpu", op_tracer="native")
    finally:
        monkeypatch.undo()
        backends.default_tracer.cache_clear()
    assert backends.default_tracer() == "native"


class _Activated(nn.Module):
    """A Linear and the functionals ``body`` calls on its output, all inside the profiled hierarchy."""

    def __init__(self, body) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.body = body

    def forward(self, x):
        return self.body(self.linear(x))


def _tracer_pass(body, function_names=None, all_functions=False):
    """One native pass of ``_Activated(body)`` on ones(2, 4); what ``take()`` returned."""
    from aitune_dispatch import schema
    from aitune_dispatch.tracing import ModuleTracker, TraceSession
    from aitune_dispatch.tracing.unseen import calls_unseen

    model = _Activated(body)
    modules = ModuleTracker(model)
    tracer = native.NativeTracer(modules.module_ids(), function_names, schema.NO_CORRELATION, all_functions)
    with TraceSession(modules, tracer):
        model(torch.ones(2, 4))
    with calls_unseen():
        return tracer._columns()


def _fresh_configuration():
    """Make the next start() intern the registry again (a pass configured with another registry)."""
    _tracer_pass(lambda y: y, function_names=frozenset({"a name no pass uses"}))


def _called_names(taken):
    names = taken["function_names"]
    return [names[code] for code in memoryview(taken["call_name"]).cast("i")]


def test_a_pass_that_reuses_the_registry_names_and_samples_what_a_fresh_configuration_would():
    def torch_level(y):
        return F.relu(torch.addmm(y, y, torch.ones(4, 4)))  # a torch-level call: named with functions="all"

    def functional_only(y):
        return F.gelu(y)

    _fresh_configuration()
    first = _tracer_pass(torch_level, all_functions=True)
    reused = _tracer_pass(functional_only, all_functions=True)  # the same registry and settings
    _fresh_configuration()
    fresh = _tracer_pass(functional_only, all_functions=True)
    assert any(name.startswith("torch.") for name in first["function_names"])  # the first pass named some
    assert reused["function_names"] == fresh["function_names"]  # ... and the reusing pass does not keep them
    assert "torch.addmm" in first["function_names"] and "torch.addmm" not in reused["function_names"]
    assert _called_names(reused) == _called_names(fresh)
    assert [name for name in _called_names(reused) if not name.startswith("torch.")] == ["linear", "gelu"]
    assert reused["samples"].keys() == fresh["samples"].keys()


def test_a_pass_with_other_sample_names_is_configured_for_them():
    def body(y):
        return F.gelu(F.relu(y))

    every = _tracer_pass(body)  # function_names None: every functional is sampled
    only_relu = _tracer_pass(body, function_names=frozenset({"relu"}))
    names = only_relu["function_names"]
    assert {names[i] for i in only_relu["samples"]} == {"relu"}
    assert {every["function_names"][i] for i in every["samples"]} == {"linear", "relu", "gelu"}
    again = _tracer_pass(body, function_names=frozenset({"relu"}))  # an equal set, another object
    assert {again["function_names"][i] for i in again["samples"]} == {"relu"}
