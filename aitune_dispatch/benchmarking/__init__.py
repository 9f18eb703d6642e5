"""Benchmarking: replay the recorded samples, try candidates on them, activate the ones that win.

``benchmark(result, ...)`` times each distinct sample in isolation with the profiler's own
collectors and says whether it launches the kernels the model ran; ``activate(...)`` routes the
intercepted calls to a candidate during inference (``docs/design.md``, "Replay").
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
