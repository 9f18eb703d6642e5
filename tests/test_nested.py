"""Nested tensors as functional inputs: profiled as they run, sampled by their parts, saved and replayed.

A strided nested tensor has no ``shape`` (it raises) and a jagged one holds symbolic sizes, so
keying a sample by its tensor's shape broke the user's forward under ``profile()``; the samples
table, saving and replay read shapes too.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from aitune_dispatch import TensorMeta, benchmark, load, tensors
from aitune_dispatch.reports import write_report

LAYOUTS = {"strided": torch.strided, "jagged": torch.jagged}


def nested(layout: str, *lengths: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(sum(lengths))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype warning for the strided layout
        return torch.nested.nested_tensor(
            [torch.randn(n, 3, generator=generator) for n in lengths], layout=LAYOUTS[layout]
        )


@pytest.fixture(params=sorted(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> str:
    return request.param


def test_a_nested_input_runs_as_without_the_profiler_and_is_sampled_by_its_parts(layout, cpu_profiler):
    model = nn.Linear(3, 8).eval()
    a, same_parts, other_parts = nested(layout, 2, 4), nested(layout, 2, 4), nested(layout, 3, 4)
    samples = [((a,), {}), ((same_parts,), {}), ((other_parts,), {})]
    with torch.no_grad():
        bare = [model(x).unbind() for (x,), _ in samples]
        _, function_data = cpu_profiler.profile(lambda x: model(x), samples, module=model, warmup_iterations=1)
        profiled = [model(x).unbind() for (x,), _ in samples]
    for before, after in zip(bare, profiled):
        assert all(torch.equal(p, q) for p, q in zip(before, after))
    # two distinct samples: the parts (2, 3) + (4, 3) twice, (3, 3) + (4, 3) once
    assert sorted(count for count, _ in function_data["linear"]) == [1, 2]
    result = cpu_profiler.last_result
    signatures = set(result.samples()["signature"])
    assert {"f32[2,*,3] f32[8,3] f32[8]"} == signatures  # the ragged dimension as *
    summary = result.describe().set_index("function_name").loc["linear"]
    weights = (8 * 3 + 8) * 4
    assert summary["tensor_size_MB"] == pytest.approx(((6 * 3 * 4 + weights) + (7 * 3 * 4 + weights)) / 2**20)


class _OpNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_keying_a_nested_sample_records_no_op_of_its_own(layout, cpu_profiler):
    # the sample key unbinds the tensor (and reads a jagged tensor's metadata): ops of ours, which
    # the bare run does not dispatch, so they must not appear among the pass's ops
    model = nn.Linear(3, 8).eval()
    x = nested(layout, 2, 4)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as bare:
        model(x)
    bare_ops = {event.name for event in bare.events()}
    assert "aten::unbind" not in bare_ops  # the test means something: our key's unbind would be new
    cpu_profiler.profile(model, [((x,), {})], warmup_iterations=0)
    recorded = set(cpu_profiler.last_result.ops.column("op").to_pylist())
    assert recorded and recorded <= bare_ops, recorded - bare_ops

    # a dispatch mode of the user's around the model sees what it sees without the profiler
    with torch.no_grad(), _OpNames() as seen_bare:
        model(x)
    with _OpNames() as seen_profiled:
        cpu_profiler.profile(model, [((x,), {})], warmup_iterations=0)
    assert seen_profiled.names == seen_bare.names
    recorded = set(cpu_profiler.last_result.ops.column("op").to_pylist())
    assert recorded and recorded <= bare_ops, recorded - bare_ops


def test_a_nested_sample_is_saved_by_its_parts_and_replayed_live(layout, cpu_profiler, tmp_path):
    model = nn.Linear(3, 8).eval()
    x = nested(layout, 2, 5)
    with torch.no_grad():
        cpu_profiler.profile(model, [((x,), {})], warmup_iterations=1)
    result = cpu_profiler.last_result
    meta = TensorMeta.from_tensor(x)
    assert meta.parts == ((2, 3), (5, 3)) and meta.shape == (2, tensors.RAGGED, 3)
    assert meta.numel() == x.numel() == 21 and meta.stride is None
    assert meta.layout == ("nested" if layout == "strided" else "jagged")
    assert "float32[2, *, 3]" in write_report(result, tmp_path / "report.html").read_text(encoding="utf-8")
    result.save(tmp_path / "saved")
    (_, (loaded_args, _)), *_ = load(tmp_path / "saved").function_data["linear"]
    assert loaded_args[0] == meta  # parts, shape, layout and size survive a save
    # replayed from the live result's tensors: the same kernels as recorded
    (row,) = benchmark(result, ["linear"], repeats=1, warmup=0).itertuples()
    assert row.ok and row.kernels_match, row.error
    # a nested tensor cannot be rebuilt from its metadata: said, not raised
    (row,) = benchmark(load(tmp_path / "saved"), ["linear"], repeats=1, warmup=0).itertuples()
    assert not row.ok and "cannot be made from its metadata" in row.error
