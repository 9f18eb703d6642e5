"""The native decoder on the GPU: the same attribution as cupti-python, and CUPTI's record layout confirmed."""

from __future__ import annotations

import collections
import warnings

import pytest
import torch
from fixture_models import cuda_sdpa_demo
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.collection import make_cuda_source
from aitune_dispatch.collection.cupti_source import CuptiSource, load_cupti

pytestmark = pytest.mark.gpu
native = pytest.importorskip("aitune_dispatch.collection._cupti_native", reason="the native decoder did not build")


class WithCopy(nn.Module):
    """Two linear layers and a host-to-device copy inside the pass (a memcpy row)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(128, 256)
        self.b = nn.Linear(256, 64)

    def forward(self, x: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x + host.to(x.device))))


def with_copy():
    x = torch.randn(32, 128, device="cuda")
    return WithCopy().eval().cuda(), [((x, torch.randn(32, 128)), {})]


WORKLOADS = {"with_copy": with_copy, "sdpa_demo": cuda_sdpa_demo}


def attribution(decoder: str, model: nn.Module, samples: list) -> tuple[collections.Counter, float]:
    """(kernel, op, module, function) multiset of one profiled pass, and its share of correlated rows."""
    profiler = ModuleFunctionKernelProfiler(decoder=decoder)
    profiler.profile(model, samples, warmup_iterations=1)
    result = profiler.last_result
    assert result.source == f"cupti/{decoder}" and not result.warnings and result.dropped_records == 0
    frame = result.to_pandas()
    keys = zip(*(frame[c].fillna("").astype(str) for c in ("kernel", "op", "module_name", "function_name")))
    return collections.Counter(keys), float(frame["op_id"].notna().mean())


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_native_and_python_decoders_attribute_identically(name):
    model, samples = WORKLOADS[name]()
    first, first_share = attribution("native", model, samples)
    python, python_share = attribution("python", model, samples)
    again, again_share = attribution("native", model, samples)  # callbacks handed back and forth
    assert sum(first.values()) > 0
    assert first == python == again
    assert first_share == python_share == again_share > 0


def test_the_copy_is_a_memcpy_row():
    model, samples = with_copy()
    rows, _ = attribution("native", model, samples)
    assert any(kernel.startswith("Memcpy HtoD") for kernel, *_ in rows)


def test_default_decoder_is_native_where_built():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback warning
        source = make_cuda_source()
    assert source.sink_name == "native"


def test_cupti_record_spacing_matches_the_compiled_sizes():
    """Live buffers are walked by CUPTI; every gap between records must equal our sized walk's size."""
    from aitune_dispatch.collection.native import NativeRecordSink

    cupti = load_cupti()
    sink = NativeRecordSink(int(cupti.ExternalCorrelationKind.CUSTOM2))
    source = CuptiSource(sink, cupti)
    model, samples = cuda_sdpa_demo()
    with torch.no_grad():
        model(*samples[0][0])
        torch.cuda.synchronize()
        source.start()
        try:
            model(*samples[0][0])
            torch.cuda.synchronize()
        finally:
            source.stop()
    kernels = source.activity().kernels
    assert kernels.num_rows > 0
    assert native.stats()["walk"] == "cupti"
    assert sink.counters["undecodable"] == sink.counters["lost"] == 0
    assert sink.counters["records"] > kernels.num_rows  # API records are counted too
    assert sink.counters["layout_mismatches"] == 0, (
        f"libcupti {sink.library} spaces records differently from the compiled sizes {native.record_sizes()} "
        f"(CUPTI API version {native.CUPTI_API_VERSION}); decode_buffer() replays need record_sizes"
    )
