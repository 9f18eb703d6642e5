"""``recording()``: a region of the user's own code recorded into the same result as ``profile()``'s,
run as written (grad and all), refused where ``profile()`` is, and nothing left installed after."""

from __future__ import annotations

import collections
import signal

import pytest
import torch
from fixture_models import mixed_model, mixed_samples
from test_restoration import global_state
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, encoded

ROW = ["module_name", "module", "function_name", "op", "kernel"]


def spec_rows(result) -> list[tuple]:  # noqa: ANN001
    """The spec's rows in order, without the times (they differ run to run)."""
    frame = result.profiling_df()
    return [tuple(map(str, row)) for row in frame[ROW].to_numpy().tolist()]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def test_a_region_gives_the_rows_profile_gives(cpu_profiler):
    model, samples = mixed_model(), mixed_samples()
    cpu_profiler.profile(model, samples, warmup_iterations=1)
    expected = cpu_profiler.last_result
    for args, kwargs in samples:  # warm, as profile()'s warm-up pass did
        with torch.no_grad():
            model(*args, **kwargs)
    with aitune_dispatch.recording(model, device="cpu") as rec, torch.no_grad():
        for args, kwargs in samples:
            model(*args, **kwargs)
    result = rec.result
    assert len(spec_rows(result)) > 0
    assert spec_rows(result) == spec_rows(expected)
    assert set(result.function_data) == set(expected.function_data)
    assert [count for count, _ in result.function_data["linear"]] == [
        count for count, _ in expected.function_data["linear"]
    ]
    assert result.metadata["tracer"] == expected.metadata["tracer"]


def test_a_training_step_runs_as_written_and_keeps_every_op(cpu_profiler):
    model = mlp()
    x = torch.randn(4, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step() -> torch.Tensor:
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    step()  # the optimizer's state exists before both runs
    before = [p.detach().clone() for p in model.parameters()]
    with aitune_dispatch.recording(model, device="cpu") as rec:
        assert torch.is_grad_enabled()  # no no_grad: the backward must run
        step()
    after = [p.detach() for p in model.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the optimizer stepped
    result = rec.result
    # the forward's calls are attributed as profile() attributes them
    frame = result.profiling_df()
    assert set(zip(frame["module_name"], frame["function_name"])) == {("0", "linear"), ("1", "gelu"), ("2", "linear")}
    # nothing is lost: every op of the step (backward and optimizer included) is in the activity
    expected = _ops_with_grad(step)
    ops = encoded.decoded(result.activity).to_pandas()["op"]
    recorded = collections.Counter(op for op in ops if not op.startswith("profiler::"))  # the Python tracer's
    # torch 2.8 dispatches detach twice per saved tensor to a TorchDispatchMode (the bare log), once to
    # the RecordFunction observer: how many detaches a mode sees is the mode's, not the step's
    if result.metadata["tracer"] == "native":
        recorded.pop("aten::detach", None)
        expected.pop("aten::detach", None)
    assert recorded == expected and sum(expected.values()) > len(frame)
    assert result.unattributed().shape[0] > 0  # the backward and optimizer ops have no module here


def _ops_with_grad(function) -> collections.Counter[str]:  # noqa: ANN001
    """The aten ops one uninstrumented call dispatches with grad enabled (``conftest.bare_ops`` runs
    no_grad), without the optimizer's record_function markers (not ops of the step)."""
    from conftest import _OpLog

    with _OpLog() as log:
        function()
    return collections.Counter(name for name in log.ops if not name.startswith("profiler::"))


def test_a_recording_inside_another_or_inside_profile_is_refused_and_nothing_is_left():
    model = mlp()
    x = torch.randn(2, 8)
    state = global_state()
    with aitune_dispatch.recording(model, device="cpu") as outer:
        with pytest.raises(RuntimeError, match="already running"):
            with aitune_dispatch.recording(model, device="cpu"):
                pass
        with pytest.raises(RuntimeError, match="already running"):
            ModuleFunctionKernelProfiler(device="cpu").profile(model, [((x,), {})], warmup_iterations=0)
        model(x)
    assert len(spec_rows(outer.result)) > 0
    with pytest.raises(RuntimeError, match="already running"):
        ModuleFunctionKernelProfiler(device="cpu").profile(
            lambda: _record_inside(model, x), None, module=model, warmup_iterations=0
        )
    assert global_state() == state


def _record_inside(model: nn.Module, x: torch.Tensor) -> None:
    with aitune_dispatch.recording(model, device="cpu"):
        model(x)


@pytest.mark.parametrize("error", [ValueError("boom"), KeyboardInterrupt()])
def test_an_exception_in_the_block_propagates_and_leaves_nothing_installed(error):
    model = mlp()
    state = global_state()
    handler = signal.getsignal(signal.SIGINT)
    rec = aitune_dispatch.recording(model, device="cpu")
    with pytest.raises(type(error)):
        with rec:
            model(torch.randn(2, 8))
            raise error
    assert global_state() == state
    assert signal.getsignal(signal.SIGINT) is handler
    with pytest.raises(RuntimeError, match="ended with an exception"):
        _ = rec.result
    # and the next recording works
    with aitune_dispatch.recording(model, device="cpu") as again:
        model(torch.randn(2, 8))
    assert len(spec_rows(again.result)) > 0


def test_a_recording_is_single_use_and_its_result_waits_for_the_end():
    model = mlp()
    rec = aitune_dispatch.recording(model, device="cpu")
    with pytest.raises(RuntimeError, match="has not been entered"):
        _ = rec.result
    with rec:
        with pytest.raises(RuntimeError, match="has not ended yet"):
            _ = rec.result
        model(torch.randn(2, 8))
    with pytest.raises(RuntimeError, match="records one region"):
        with rec:
            pass
    assert len(spec_rows(rec.result)) > 0


def test_recording_refuses_what_is_not_a_module_and_options_profile_refuses():
    with pytest.raises(TypeError, match="takes the nn.Module"):
        aitune_dispatch.recording(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="functions"):
        aitune_dispatch.recording(mlp(), device="cpu", functions="some")


def test_the_api_pages_region_example_runs():
    """docs/api.md's example of ``recording()``, run as written (it profiles on the CPU)."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split("## A region of your own code", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 3
    scope: dict = {}
    exec(compile("\n".join(blocks), "docs/api.md", "exec"), scope)  # noqa: S102 - our own page's example
    assert set(scope["region_df"]["function_name"]) == {"linear", "gelu"}
    assert {"linear", "gelu"} <= set(scope["region_data"])
    assert len(scope["rest"]) > 0
    backward = scope["backward_rows"]
    assert {"linear", "gelu"} <= set(backward["function_name"].dropna())  # the forward's calls
    assert set(scope["optimizer_rows"]["function_name"]) == {"AdamW.step"}
    per_kernel = scope["per_kernel"]
    assert len(per_kernel) > 0 and set(per_kernel["steps"]) <= {5}
    assert scope["stepped"].result.metadata["first_step"] == "2"
    assert scope["roots"]["module_name"].to_pylist() == ["Linear", "Linear_1"]
    assert len(scope["rooted"].result.steps(by="module_name")) == 2  # both roots, in each of the 3 steps
    assert set(scope["rooted"].result.steps(by="module_name")["steps"]) == {3}


def test_a_schedule_records_the_active_steps_only_and_keeps_each_rows_step():
    model = mlp()
    with aitune_dispatch.recording(model, device="cpu", wait=1, warmup=1, active=3) as rec:
        for _ in range(7):
            model(torch.randn(2, 8))
            rec.step()
        assert rec.step_number == 7
    result = rec.result
    assert result.metadata["first_step"] == "2"
    steps = result.steps(by="function_name").set_index("function_name")
    # three steps of two linear calls (aten::t and aten::addmm each) and one gelu, nothing of steps 0-1 or 5-6
    assert steps.loc["linear", ["steps", "launches_per_step"]].tolist() == [3, 4.0]
    assert steps.loc["gelu", ["steps", "launches_per_step"]].tolist() == [3, 1.0]
    frame = result.profiling_df()
    assert (frame["function_name"] == "linear").sum() == 3 * 2 * 2  # per call: aten::t and aten::addmm
    from aitune_dispatch.results.views import row_steps

    assert set(row_steps(result).tolist()) == {2, 3, 4}


def test_a_schedule_whose_steps_never_come_says_so_and_bad_schedules_are_refused():
    model = mlp()
    state = global_state()
    with aitune_dispatch.recording(model, device="cpu", wait=5) as rec:
        model(torch.randn(2, 8))
        rec.step()
    assert global_state() == state  # nothing was installed
    with pytest.raises(RuntimeError, match="records from step 5"):
        _ = rec.result
    for bad in ({"wait": -1}, {"warmup": 1.5}, {"active": 0}, {"active": True}):
        with pytest.raises(ValueError, match="must be an int"):
            aitune_dispatch.recording(model, device="cpu", **bad)
    with pytest.raises(RuntimeError, match="inside the recording"):
        aitune_dispatch.recording(model, device="cpu").step()


@pytest.mark.kineto  # runs torch.profiler, whose Kineto keeps CUPTI's callback subscription on a GPU machine
def test_a_recording_while_torch_profiler_collects_is_refused_as_profile_is():
    model = mlp()
    state = global_state()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with pytest.raises(RuntimeError, match="torch.profiler is collecting"):
            with aitune_dispatch.recording(model, device="cpu"):
                model(torch.randn(2, 8))
    assert global_state() == state
