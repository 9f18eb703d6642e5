"""Functional calls seen at the function objects (``interception="objects"``): the same rows as the
mode, the calls the mode cannot see, and nothing left installed (docs/design.md, "Functional calls at
the function object")."""

from __future__ import annotations

import functools
import os
import threading
import warnings

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from fixture_models import mixed_model, mixed_samples
from torch import nn
from torch.overrides import TorchFunctionMode

from aitune_dispatch import ModuleFunctionKernelProfiler, backends
from aitune_dispatch.config import ProfileConfig
from aitune_dispatch.tracing import native
from aitune_dispatch.tracing.functional import functional_registry, hook_registry

pytestmark = pytest.mark.single_backend
UNSUPPORTED = native.hooks_unsupported()
needs_hooks = pytest.mark.skipif(UNSUPPORTED is not None, reason=f"function-object hooks: {UNSUPPORTED}")
ROW_KEY = ["module_name", "module", "function_name", "op", "kernel"]


def profile(model: nn.Module, samples: list, interception: str, **options) -> tuple[pd.DataFrame, dict]:
    profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer="native", interception=interception, **options)
    frame, data = profiler.profile(model, samples, warmup_iterations=1)
    assert profiler.last_result.metadata["interception"] == interception
    return frame, data


def rows(frame: pd.DataFrame) -> list[tuple]:
    return sorted(map(tuple, frame[ROW_KEY].astype(str).to_numpy().tolist()))


def hooked_now() -> list[str]:
    tracer = native.load()
    return sorted(name for func, name in hook_registry().items() if tracer.hooked(func))


class GateLess(nn.Module):
    """Functionals without a has_torch_function gate, which no TorchFunctionMode sees."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.experts = nn.Parameter(torch.randn(2, 16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.sigmoid(self.fc(x)) + F.tanh(x)
        offsets = torch.tensor([8, 16], dtype=torch.int32)
        y = F.grouped_mm(y.bfloat16(), self.experts.bfloat16(), offs=offsets).float()
        return F.relu_(y)


class Indirect(nn.Module):
    """Calls that reach the functionals other than by their attribute: partial, map, a captured reference."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = functools.partial(F.gelu, approximate="tanh")  # transformers' gelu_pytorch_tanh
        self.norm = F.layer_norm  # captured before the pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.fc(x))
        (y,) = map(F.silu, [y])
        return self.norm(y, (8,))


class InPlace(nn.Module):
    """torch's functionals that call an in-place builtin of torch.nn.functional's (``F.relu`` with
    ``inplace=True`` calls ``torch.relu_``, which *is* ``F.relu_``), and a direct call of one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.acts = nn.Sequential(
            nn.ReLU(inplace=True), nn.ELU(inplace=True), nn.LeakyReLU(inplace=True), nn.Hardtanh(inplace=True),
            nn.ReLU6(inplace=True), nn.SELU(inplace=True), nn.CELU(inplace=True), nn.Threshold(0.1, 0.0, inplace=True),
            nn.RReLU(inplace=True).eval(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.acts(self.fc(x))
        return F.relu_(y + 1)


def workloads() -> dict[str, tuple[nn.Module, list]]:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    encoder = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)  # train mode: no fast path
    return {
        "mixed": (mixed_model(), mixed_samples()),
        "encoder_layer": (encoder, [((x,), {})]),
        # training mode: no fused fast path
        "mha": (nn.MultiheadAttention(16, 2, batch_first=True), [((x, x, x), {"need_weights": True})]),
        "conv": (nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2)).eval(),
                 [((torch.randn(1, 3, 12, 12),), {})]),
    }


@needs_hooks
@pytest.mark.parametrize("name", list(workloads()))
def test_rows_equal_the_mode_path(name: str) -> None:
    model, samples = workloads()[name]
    with torch.no_grad():
        objects, _ = profile(model, samples, "objects")
        mode, _ = profile(model, samples, "mode")
    assert len(objects) > 0
    assert rows(objects) == rows(mode)


@needs_hooks
def test_gate_less_functionals_are_calls_of_their_own() -> None:
    model = GateLess()
    samples = [((torch.randn(16, 16),), {})]
    with torch.no_grad():
        objects, data = profile(model, samples, "objects")
        mode, _ = profile(model, samples, "mode")
    seen = set(objects["function_name"])
    assert {"sigmoid", "tanh", "grouped_mm", "relu_", "linear"} <= seen
    assert set(objects.loc[objects["function_name"] == "grouped_mm", "op"]) == {"aten::_grouped_mm"}
    assert {"grouped_mm", "sigmoid", "tanh"} <= set(data)
    # what the mode misses: these ops have no functional call there
    assert not {"sigmoid", "tanh", "grouped_mm"} & set(mode["function_name"])


@needs_hooks
@pytest.mark.parametrize("model_type, shape", [(GateLess, (16, 16)), (InPlace, (4, 8))], ids=["gate_less", "in_place"])
def test_rows_match_the_reference(model_type: type[nn.Module], shape: tuple[int, int]) -> None:
    """Gate-less functionals, and in-place builtins called by torch's own functionals and by the user."""
    from benchmarks.compare_reference import agreement
    from benchmarks.reference_baseline import ReferenceBaseline

    model = model_type()
    samples = [((torch.randn(*shape),), {})]
    with torch.no_grad():
        ours, data = profile(model, samples, "objects")
        theirs, their_data = ReferenceBaseline(device="cpu").profile(model, samples, warmup_iterations=1)
    report = agreement(ours, theirs)
    assert report.ok, report.to_dict()
    assert set(data) == set(their_data)


@needs_hooks
def test_an_in_place_builtin_called_by_another_functional_is_part_of_that_call() -> None:
    model = InPlace()
    samples = [((torch.randn(4, 8),), {})]
    with torch.no_grad():
        objects, data = profile(model, samples, "objects")
        mode, _ = profile(model, samples, "mode")
    inside = objects[objects["module_name"].str.startswith("acts")]
    # relu(x, inplace=True) is one call, "relu", as the mode records it; none of the nine is "<name>_"
    assert rows(inside) == rows(mode[mode["module_name"].str.startswith("acts")])
    assert not any(name.endswith("_") for name in inside["function_name"])
    named = {"relu", "elu", "leaky_relu", "hardtanh", "selu", "celu", "threshold", "rrelu"}
    assert named <= set(inside["function_name"])
    # called by the user at the top of a call, the builtin is a call of its own, which the mode misses
    direct = objects[objects["function_name"] == "relu_"]
    assert set(direct["module_name"]) == {""} and set(direct["op"]) == {"aten::relu_"}
    assert "relu_" in data and "relu_" not in set(mode["function_name"])


@needs_hooks
def test_calls_through_partial_map_and_captured_references_are_recorded() -> None:
    model = Indirect().eval()
    with torch.no_grad():
        frame, data = profile(model, [((torch.randn(2, 8),), {})], "objects")
    assert {"linear", "gelu", "silu", "layer_norm"} <= set(frame["function_name"])
    assert [kwargs for _, (_, kwargs) in data["gelu"]] == [{"approximate": "tanh"}]  # the call as written


@needs_hooks
def test_a_functional_calling_another_records_both_nested() -> None:
    model = nn.MultiheadAttention(16, 2, batch_first=True)  # training mode: no fused fast path
    x = torch.randn(2, 5, 16)
    profiler = ModuleFunctionKernelProfiler(device="cpu", interception="objects")
    with torch.no_grad():
        full = profiler.profile_result(model, [((x, x, x), {"need_weights": True})], warmup_iterations=0)
    calls = full.calls.to_pandas()
    names = dict(zip(calls["call_id"], calls["function_name"]))
    outer = calls.loc[calls["function_name"] == "multi_head_attention_forward", "call_id"].tolist()
    assert len(outer) == 1
    inner = {names[c] for c, parent in zip(calls["call_id"], calls["parent_call_id"]) if parent == outer[0]}
    assert {"linear", "softmax"} <= inner


@needs_hooks
def test_the_default_is_objects_and_the_slots_are_restored() -> None:
    model, samples = workloads()["mixed"]
    profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer="native")
    inside: list[list[str]] = []
    identity = (F.gelu, hash(F.gelu), F.relu, F.relu.__code__)

    def spy(module: nn.Module, args: tuple) -> None:
        inside.append(hooked_now())

    handle = model.fc.register_forward_pre_hook(spy)
    try:
        profiler.profile(model, samples, warmup_iterations=0)
    finally:
        handle.remove()
    assert profiler.last_result.metadata["interception"] == "objects"
    assert {"gelu", "relu", "linear", "layer_norm"} <= set(inside[0])
    assert (F.gelu, hash(F.gelu), F.relu, F.relu.__code__) == identity  # the same objects, never replaced
    assert hooked_now() == [] and native.load().hooks_installed() == 0


class Raises(nn.Module):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F.gelu(self.fc(x))
        raise self.error


@needs_hooks
@pytest.mark.parametrize("error", [ValueError("inference failed"), KeyboardInterrupt()])
def test_hooks_are_removed_when_the_pass_raises(error: BaseException) -> None:
    profiler = ModuleFunctionKernelProfiler(device="cpu", interception="objects")
    with pytest.raises(type(error)):
        profiler.profile(Raises(error), [((torch.randn(2, 4),), {})], warmup_iterations=0)
    assert hooked_now() == [] and native.load().hooks_installed() == 0


class LogMode(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.names.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


@needs_hooks
def test_a_users_mode_sees_every_call_and_rows_are_not_doubled() -> None:
    model, samples = workloads()["mixed"]
    with torch.no_grad(), LogMode() as bare:
        for args, kwargs in samples:
            model(*args, **kwargs)
    with torch.no_grad(), LogMode() as profiled:
        frame, _ = profile(model, samples, "objects")
    recorded = profiled.names[-len(bare.names) :]
    assert recorded == bare.names  # the recorded pass, as the mode saw it bare
    alone, _ = profile(model, samples, "objects")
    assert rows(frame) == rows(alone)  # the mode calling the functional again is the same call


@needs_hooks
def test_calls_of_a_thread_the_pass_starts_are_its_own() -> None:
    class Threaded(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            worker = threading.Thread(target=lambda: F.softsign(x))
            worker.start()
            worker.join()
            return F.gelu(self.fc(x))

    profiler = ModuleFunctionKernelProfiler(device="cpu", interception="objects")
    with torch.no_grad():
        result = profiler.profile_result(Threaded(), [((torch.randn(2, 4),), {})], warmup_iterations=0)
    calls = result.calls.to_pandas()
    worker = calls[calls["function_name"] == "softsign"]
    main = calls[calls["function_name"] == "gelu"]
    assert len(worker) == 1 and len(main) == 1
    assert worker["thread"].iloc[0] != main["thread"].iloc[0]
    assert worker["parent_call_id"].iloc[0] == -1 and worker["module_id"].iloc[0] == -1  # not main's hierarchy


@needs_hooks
def test_a_thread_running_before_the_pass_is_not_recorded() -> None:
    stop, started = threading.Event(), threading.Event()

    def background() -> None:
        started.set()
        while not stop.is_set():
            F.softsign(torch.ones(2))

    worker = threading.Thread(target=background, daemon=True)
    worker.start()
    started.wait()
    try:
        with torch.no_grad():
            result = ModuleFunctionKernelProfiler(device="cpu", interception="objects").profile_result(
                mixed_model(), mixed_samples(), warmup_iterations=0
            )
    finally:
        stop.set()
        worker.join()
    assert "softsign" not in set(result.calls.to_pandas()["function_name"])


@needs_hooks
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_has_no_hooks() -> None:
    class Forks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.child_hooked: int | None = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            read, write = os.pipe()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a multi-threaded process
                pid = os.fork()
            if pid == 0:
                os.close(read)
                os.write(write, str(native.load().hooks_installed() + int(native.load().hooked(F.gelu))).encode())
                os._exit(0)
            os.close(write)
            self.child_hooked = int(os.read(read, 16).decode())
            os.close(read)
            os.waitpid(pid, 0)
            return F.gelu(self.fc(x))

    model = Forks()
    with torch.no_grad():
        ModuleFunctionKernelProfiler(device="cpu", interception="objects").profile(
            model, [((torch.randn(2, 4),), {})], warmup_iterations=0
        )
    assert model.child_hooked == 0


@needs_hooks
def test_compiled_code_is_not_recompiled_under_the_hooks() -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model = torch.compile(mixed_model(), backend="eager")
    samples = mixed_samples()[:1]
    with torch.no_grad():
        model(*samples[0][0])
        graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what a non-Inductor backend attributes is not this test's
            ModuleFunctionKernelProfiler(device="cpu", interception="objects").profile(
                model, samples, warmup_iterations=1
            )
        assert counters["stats"]["unique_graphs"] == graphs
        assert sum(counters["graph_break"].values()) == breaks
        # the mode path, for contrast, compiles a graph of its own (Dynamo guards on the mode stack)
        ModuleFunctionKernelProfiler(device="cpu", interception="mode").profile(model, samples, warmup_iterations=1)
    torch._dynamo.reset()


def test_objects_are_refused_where_only_a_mode_sees_the_calls() -> None:
    with pytest.raises(ValueError, match="functions='all'"):
        ProfileConfig(functions="all", interception="objects")
    with pytest.raises(ValueError, match="op_tracer='native'"):
        ProfileConfig(op_tracer="python", interception="objects")
    with pytest.raises(ValueError, match="interception must be"):
        ProfileConfig(interception="hooks")
    assert backends.resolve_interception(None, "python", False) == "mode"
    assert backends.resolve_interception(None, "native", True) == "mode"


def test_an_unhookable_cpython_falls_back_to_the_mode_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    if not native.available():
        pytest.skip("native tracer not built")
    monkeypatch.setattr(native, "hooks_unsupported", lambda: "a CPython laid out otherwise (test)")
    monkeypatch.setattr("sys.version_info", (3, 12, 0, "final", 0))
    backends.hooks_available.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = ModuleFunctionKernelProfiler(device="cpu").profile_result(
                mixed_model(), mixed_samples(), warmup_iterations=0
            )
            second = ModuleFunctionKernelProfiler(device="cpu").profile_result(
                mixed_model(), mixed_samples(), warmup_iterations=0
            )
        fallbacks = [w for w in caught if "laid out otherwise" in str(w.message)]
        assert len(fallbacks) == 1 and "interception='mode'" in str(fallbacks[0].message)
        assert first.metadata["interception"] == second.metadata["interception"] == "mode"
        assert len(first.profiling_df()) > 0
        with pytest.raises(RuntimeError, match="laid out otherwise"):
            ModuleFunctionKernelProfiler(device="cpu", interception="objects").profile(
                mixed_model(), mixed_samples(), warmup_iterations=0
            )
    finally:
        backends.hooks_available.cache_clear()


def test_the_hook_registry_holds_every_public_functional() -> None:
    registry = hook_registry()
    names = set(registry.values())
    assert set(functional_registry().values()) <= names
    assert {"sigmoid", "tanh", "relu_"} <= names
    if hasattr(F, "grouped_mm"):
        assert "grouped_mm" in names
    assert not {"has_torch_function", "handle_torch_function", "boolean_dispatch", "Tensor"} & names
    assert hook_registry() is registry  # one dict while torch.nn.functional is unchanged
