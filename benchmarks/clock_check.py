"""Why kernel durations differ between runs: the same pass timed bare, by us and by the baseline.

Prints per-method kernel-time sums for vit_b_16 in alternating order, with the SM clock read
through NVML before each run, so a clock-state difference shows up next to the durations.
"""

from __future__ import annotations

import time

import torch

from aitune_dispatch import ModuleFunctionKernelProfiler, encoded
from aitune_dispatch.collection import make_cuda_source

from .reference_baseline import ReferenceBaseline
from .zoo import build


def sm_clock_mhz() -> int:
    """Current SM clock (NVML), or -1."""
    try:
        return int(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001
        return -1


def bare_us(model, samples) -> float:
    """Kernel-time sum of one uninstrumented pass (CUPTI only)."""
    source = make_cuda_source()
    torch.cuda.synchronize()
    source.start()
    with torch.no_grad():
        for args, kwargs in samples:
            model(*args, **kwargs)
    torch.cuda.synchronize()
    source.stop()
    kernels = encoded.decoded(source.activity().kernels).to_pandas()
    return float(((kernels["end_ns"] - kernels["start_ns"]) / 1000).sum())


def main() -> None:
    model, samples = build("vit_b_16", "cuda", 1, size="bench")
    ours = ModuleFunctionKernelProfiler()
    baseline = ReferenceBaseline(device="cuda")
    for round_ in range(3):
        for name, run in (
            ("bare", lambda: bare_us(model, samples)),
            ("ours", lambda: ours.profile_result(model, samples, warmup_iterations=1).total_us),
            ("baseline", lambda: float(baseline.profile(model, samples, warmup_iterations=1)[0]["kernel_us"].sum())),
        ):
            clock = sm_clock_mhz()
            started = time.perf_counter()
            total = run()
            seconds = time.perf_counter() - started
            print(f"round {round_} {name:8s} clock {clock} MHz  kernel sum {total:9.1f} us  ({seconds:.2f} s)")


if __name__ == "__main__":
    main()
