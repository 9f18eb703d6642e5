"""The activity-source registry: a source registered for a device is the one every run on it collects with."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, collection, schema
from aitune_dispatch.config import ProfileConfig


class _Renaming(collection.CpuOpTimer):
    """A stand-in for a new source: the CPU op timer's activity, named as another source would name it."""

    name = "renaming"

    def activity(self, ops: pa.Table) -> collection.Activity:
        activity = super().activity(ops)
        names = pc.replace_substring(pc.cast(activity.kernels["name"], pa.string()), "cpu::", "mine::")
        column = activity.kernels.schema.get_field_index("name")
        kernels = activity.kernels.set_column(column, "name", pc.cast(names, schema.STRING))
        return replace(activity, kernels=kernels, source=self.name)


@pytest.fixture
def renaming_source():
    made: list[ProfileConfig] = []

    def factory(config: ProfileConfig) -> collection.ActivitySource:
        made.append(config)
        return _Renaming()

    previous = collection.register_source("cpu", factory)
    try:
        yield made
    finally:
        assert collection.register_source("cpu", previous) is factory


def test_a_registered_source_collects_every_run_on_its_device(renaming_source, tracing_backend):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    result = ModuleFunctionKernelProfiler(device="cpu").profile_result(model, [((torch.ones(2, 4),), {})])
    assert len(renaming_source) == 1 and renaming_source[0].op_tracer == tracing_backend  # resolved first
    assert result.source == "renaming"
    kernels = set(result.profiling_df()["kernel"])
    assert kernels and all(k.startswith("mine::aten::") for k in kernels), kernels
    assert set(result.profiling_df()["function_name"]) == {"linear", "relu"}  # attributed as before


def test_a_registration_lasts_until_it_is_undone(renaming_source):
    assert type(collection.make_source(ProfileConfig(device="cpu"))) is _Renaming


def test_the_cpu_device_collects_with_the_cpu_op_timer():
    assert type(collection.make_source(ProfileConfig(device="cpu"))) is collection.CpuOpTimer


def test_an_unregistered_device_is_refused_with_the_known_ones():
    config = ProfileConfig(device="cpu")
    object.__setattr__(config, "device", "rocm")  # a device config.DEVICES would name once its source exists
    known = r"known: \['cpu', 'cuda'\]"
    with pytest.raises(ValueError, match=rf"no activity source is registered for device 'rocm'; {known}"):
        collection.make_source(config)
