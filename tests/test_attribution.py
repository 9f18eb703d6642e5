"""Module, functional and op attribution on the CPU activity source."""

from __future__ import annotations

import collections
import threading

import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, encoded


class RootAndChildren(nn.Module):
    """Three F.linear calls from the root, one through ``first``, two through ``second``."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 8)
        self.weight = nn.Parameter(torch.randn(8, 8))
        self.bias = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = F.linear(x, self.weight, self.bias)
        x = self.first(x)
        return self.second(self.second(x))


def test_root_first_second_ratio_is_3_1_2(cpu_profiler):
    profiling_df, _ = cpu_profiler.profile(RootAndChildren(), [((torch.randn(4, 8),), {})], warmup_iterations=1)
    addmm = profiling_df[profiling_df["op"] == "aten::addmm"]
    # one addmm per 2-D linear with bias: root 3, first 1, second 2
    assert addmm["module_name"].value_counts().to_dict() == {"": 3, "first": 1, "second": 2}
    rows = profiling_df["module_name"].value_counts()
    assert rows[""] == 3 * rows["first"] and rows["second"] == 2 * rows["first"]
    assert set(profiling_df["function_name"]) == {"linear"}


def test_module_objects_are_the_live_modules(cpu_profiler):
    model = RootAndChildren()
    profiling_df, _ = cpu_profiler.profile(model, [((torch.randn(4, 8),), {})], warmup_iterations=0)
    by_name = dict(model.named_modules())
    assert all(row.module is by_name[row.module_name] for row in profiling_df.itertuples())


def test_nested_functionals_go_to_the_innermost_call(cpu_profiler):
    # training mode keeps nn.MultiheadAttention on its Python slow path
    mha = nn.MultiheadAttention(16, 2, batch_first=True, dropout=0.0).train()
    x = torch.randn(2, 5, 16)
    cpu_profiler.profile(mha, [((x, x, x), {"need_weights": False})], warmup_iterations=0)
    rows = cpu_profiler.last_result.to_pandas()
    matmul_functions = rows.loc[rows["op"].isin(["aten::mm", "aten::addmm"]), "function_name"].tolist()
    # in-projection (packed q/k/v: one mm on the 3-D input) and out-projection (one addmm): both are
    # attributed to linear, not to the enclosing multi_head_attention_forward
    assert matmul_functions == ["linear", "linear"]
    attention = rows[rows["op"].str.contains("scaled_dot_product|flash_attention|_efficient_attention")]
    assert len(attention) >= 1 and set(attention["function_name"]) == {"scaled_dot_product_attention"}
    calls = encoded.decoded(cpu_profiler.last_result.calls).to_pandas()
    outer = calls.loc[calls["function_name"] == "multi_head_attention_forward", "call_id"].item()
    nested = calls[calls["parent_call_id"] == outer]["function_name"].tolist()
    assert nested == ["linear", "scaled_dot_product_attention", "linear"]


def test_boolean_dispatch_functional_is_one_call(cpu_profiler):
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2)).eval()
    profiling_df, _ = cpu_profiler.profile(net, [((torch.randn(1, 3, 8, 8),), {})], warmup_iterations=0)
    calls = encoded.decoded(cpu_profiler.last_result.calls).to_pandas()
    assert calls["function_name"].tolist() == ["conv2d", "max_pool2d"]
    assert profiling_df.loc[profiling_df["module_name"] == "1", "function_name"].unique().tolist() == ["max_pool2d"]


def test_fast_paths_run_as_without_the_profiler(cpu_profiler, bare_ops):
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    for model, args in ((encoder, (x,)), (mha, (x, x, x))):
        expected = bare_ops(model, *args)
        cpu_profiler.profile(model, [(args, {})], warmup_iterations=0)
        seen = collections.Counter(cpu_profiler.last_result.to_pandas()["op"])
        assert seen == expected
    # the fast-path kernels are attributed honestly: to their module, with no functional call
    rows = cpu_profiler.last_result.to_pandas()
    assert rows["op"].tolist() == ["aten::_native_multi_head_attention"]
    assert rows["module_name"].tolist() == [""] and rows["call_id"].tolist() == [-1]


def test_ops_outside_the_hierarchy_have_no_module(cpu_profiler):
    model = nn.Linear(4, 4)

    def pipeline():
        y = F.relu(torch.randn(2, 4))  # functional call, outside the profiled module
        return model(y)

    profiling_df, _ = cpu_profiler.profile(pipeline, module=model, warmup_iterations=0)
    assert set(profiling_df["function_name"]) == {"linear"}
    unattributed = cpu_profiler.last_result.unattributed()
    relu = unattributed[unattributed["op"] == "aten::relu"]
    assert len(relu) == 1 and relu["function_name"].item() == "relu" and relu["module_name"].isna().all()


def test_other_threads_are_never_attributed(cpu_profiler, bare_ops):
    model = nn.Sequential(nn.Linear(4, 4))
    stop = threading.Event()

    def background():
        while not stop.is_set():
            model(torch.randn(2, 4))  # the same module, run by another thread during profiling

    worker = threading.Thread(target=background)
    worker.start()
    try:
        profiling_df, _ = cpu_profiler.profile(model, [((torch.randn(2, 4),), {})], warmup_iterations=0)
    finally:
        stop.set()
        worker.join()
    expected = bare_ops(model, torch.randn(2, 4))
    assert collections.Counter(cpu_profiler.last_result.to_pandas()["op"]) == expected
    assert set(cpu_profiler.last_result.ops.column("thread").to_pylist()) == {0}
    assert len(profiling_df) == sum(expected.values())


def test_kernel_durations_are_the_op_durations(cpu_profiler):
    cpu_profiler.profile(nn.Linear(64, 64), [((torch.randn(32, 64),), {})], warmup_iterations=0)
    activity = cpu_profiler.last_result.to_pandas()
    ops = encoded.decoded(cpu_profiler.last_result.ops).to_pandas().set_index("op_id")
    # the CPU kernel interval lies inside the op's dispatch interval
    joined = activity.merge(ops[["start_ns", "end_ns"]], left_on="op_id", right_index=True, suffixes=("", "_op"))
    assert (joined["start_ns"] >= joined["start_ns_op"]).all() and (joined["end_ns"] <= joined["end_ns_op"]).all()
    assert ((joined["end_ns"] - joined["start_ns"]) / 1000.0 == joined["kernel_us"]).all()


def test_second_profile_gives_the_same_rows():
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    model = RootAndChildren()
    samples = [((torch.randn(4, 8),), {})]
    first, _ = profiler.profile(model, samples, warmup_iterations=0)
    second, _ = profiler.profile(model, samples, warmup_iterations=0)
    columns = ["module_name", "function_name", "op", "kernel"]
    assert first[columns].values.tolist() == second[columns].values.tolist()


def test_only_functionals_that_can_reach_others_re_arm_the_mode():
    from aitune_dispatch.tracing.functional import may_call_functional

    # relu's body calls torch.relu (and itself through handle_torch_function): no nested functional
    assert not may_call_functional(F.relu) and not may_call_functional(F.layer_norm)
    # multi_head_attention_forward reaches linear through _in_projection_packed; max_pool2d's
    # boolean-dispatch wrapper reaches its two implementations through closure cells
    assert may_call_functional(F.multi_head_attention_forward)
    assert may_call_functional(F.max_pool2d)


def test_functionals_torch_lists_as_ignored_that_dispatch_to_the_mode_are_calls(cpu_profiler):
    # torch.overrides.get_ignored_functions() lists F.hardswish and F.hardsigmoid, yet both hand
    # themselves to handle_torch_function (nn.Hardswish / nn.Hardsigmoid call them): the reference
    # patches them, so their ops are theirs here too, not unattributed
    net = nn.Sequential(nn.Linear(4, 4), nn.Hardswish(), nn.Hardsigmoid()).eval()
    profiling_df, function_data = cpu_profiler.profile(net, [((torch.randn(2, 4),), {})], warmup_iterations=0)
    rows = profiling_df[["module_name", "function_name", "op"]].values.tolist()
    assert rows[-2:] == [["1", "hardswish", "aten::hardswish"], ["2", "hardsigmoid", "aten::hardsigmoid"]]
    assert {name: [count for count, _ in entries] for name, entries in function_data.items()} == {
        "linear": [1],
        "hardswish": [1],
        "hardsigmoid": [1],
    }
    names = dict(ModuleFunctionKernelProfiler.get_functions_to_patch())
    assert names["hardswish"] is F.hardswish and names["hardsigmoid"] is F.hardsigmoid


class _FlexAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        return flex_attention(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: score + (q_idx - kv_idx))


def test_a_higher_order_operator_runs_and_is_recorded(cpu_profiler, tracing_backend):
    # eager flex_attention is a higher-order operator: torch refuses to run one under a dispatch
    # mode that does not say it supports them (torch 2.8: one without a rule for its type), which broke
    # the user's forward with the Python backend
    model = _FlexAttention()
    q, k, v = (torch.randn(1, 2, 8, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    with torch.no_grad():
        expected = model(q, k, v)
    outputs = []
    cpu_profiler.profile(lambda: outputs.append(model(q, k, v)), [((), {})], module=model, warmup_iterations=1)
    assert torch.equal(outputs[-1], expected)
    ops = cpu_profiler.last_result.ops.column("op").to_pylist()
    if tracing_backend == "python":  # one op, the ops inside it unseen (README, the Python backend)
        assert ops.count("higher_order::flex_attention") == 1
    else:  # the native tracer records the aten ops the operator runs: the scores' matmuls among them
        assert not any(op.startswith("higher_order::") for op in ops)
        assert {"aten::bmm", "aten::logsumexp"} <= set(ops)
    # the rules that hand the operators to our mode on torch 2.8 are gone once the pass has ended
    from torch._ops import _higher_order_ops

    from aitune_dispatch.tracing.dispatch import OpMode

    assert not [name for name, operator in _higher_order_ops.items() if OpMode in operator.python_key_table]
