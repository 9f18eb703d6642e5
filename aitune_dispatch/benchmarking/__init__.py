"""Benchmarking: replay the collected samples with exact kernels, try candidates, activate them.

``benchmark(result, ...)`` replays each distinct sample of the selected functions in isolation,
timed by the profiler's own collectors, and says whether the replay launches the kernels the
model ran; candidates are validated against the original and timed on the same samples.
``activate(...)`` routes the intercepted functional calls to a candidate during inference.
"""

from .activation import Activation, activate
from .candidates import ORIGINAL, candidate_name, normalize_candidates, original_function
from .inputs import ReplayRefused, clone_exact, compare_outputs, random_tensor
from .replay import BENCHMARK_COLUMNS, benchmark, replay_device, weighted_totals
from .yardstick import RecordedSample, recorded_samples

__all__ = [
    "BENCHMARK_COLUMNS",
    "ORIGINAL",
    "Activation",
    "RecordedSample",
    "ReplayRefused",
    "activate",
    "benchmark",
    "candidate_name",
    "clone_exact",
    "compare_outputs",
    "normalize_candidates",
    "original_function",
    "random_tensor",
    "recorded_samples",
    "replay_device",
    "weighted_totals",
]
