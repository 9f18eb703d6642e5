"""Several GPUs in one process: which devices a pass used (a primary context exists), their properties,
and the checks that one CUPTI clock covers them all (``docs/design.md``, "The clock")."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .. import schema
from ..torch_compat import primary_context_probe

# CUPTI converts GPU timestamps to its clock with an error of a few microseconds
CLOCK_TOLERANCE_NS = 100_000


def devices_in_use() -> tuple[int, ...]:
    """Ordinals of the CUDA devices that have a context, the current first (only it where torch cannot say)."""
    if not torch.cuda.is_available():
        return ()
    current = int(torch.cuda.current_device())
    has_context = primary_context_probe()
    if has_context is None:  # pragma: no cover - every CUDA build of torch >= 2.0 has it
        return (current,)
    others = [d for d in range(torch.cuda.device_count()) if d != current and has_context(d)]
    return (current, *others)


def other_devices_in_use() -> tuple[int, ...]:
    """:func:`devices_in_use` without the current device (empty with one GPU)."""
    return devices_in_use()[1:]


def synchronize(devices: Iterable[int]) -> None:
    """Wait for every kernel queued on each of ``devices``."""
    for device in devices:
        torch.cuda.synchronize(device)


def activity_devices(kernels: pa.Table) -> list[int]:
    """The GPU devices (``device >= 0``) that rows of ``kernels`` ran on, ascending."""
    if kernels.num_rows == 0:
        return []
    gpu = pc.filter(kernels["device"], pc.greater_equal(kernels["device"], 0))
    return sorted(int(d) for d in pc.unique(gpu).to_pylist() if d is not None)


def _properties(device: int) -> dict[str, str]:
    """A GPU's name, compute capability, memory and SM count under the ``schema.META_GPU_*`` keys."""
    props = torch.cuda.get_device_properties(device)
    return {
        schema.META_GPU_NAME: str(props.name),
        schema.META_GPU_CAPABILITY: f"{props.major}.{props.minor}",
        schema.META_GPU_MEMORY: str(int(props.total_memory)),
        schema.META_GPU_SMS: str(int(props.multi_processor_count)),
    }


def current_gpu_metadata() -> dict[str, str]:
    """The current GPU's name, compute capability, memory and SM count; empty where no device answers."""
    try:
        return _properties(torch.cuda.current_device())
    except (RuntimeError, AssertionError):
        return {}


def device_metadata(activity: pa.Table) -> dict[str, str]:
    """``gpu_devices`` and ``gpu_properties`` (JSON) metadata where kernels ran on more than one GPU."""
    devices = activity_devices(activity)
    if len(devices) <= 1:
        return {}
    try:
        properties = {str(device): _properties(device) for device in devices}
    except (RuntimeError, AssertionError):  # no usable device to ask: name the devices only
        properties = {}
    return {
        schema.GPU_DEVICES_KEY: ",".join(map(str, devices)),
        schema.GPU_PROPERTIES_KEY: json.dumps(properties, sort_keys=True),
    }


def clock_coverage_warnings(
    kernels: pa.Table, start_ts: int, end_ts: int, tolerance_ns: int = CLOCK_TOLERANCE_NS
) -> list[str]:
    """One warning per device whose records, in CUPTI's clock, lie over ``tolerance_ns`` outside
    ``[start_ts, end_ts]``; none with one device."""
    devices = activity_devices(kernels)
    if len(devices) <= 1:
        return []
    device = np.asarray(kernels["device"].to_numpy(), dtype=np.int64)
    starts = np.asarray(kernels["start_ns"].to_numpy(), dtype=np.int64)
    ends = np.asarray(kernels["end_ns"].to_numpy(), dtype=np.int64)
    out = []
    for d in devices:
        on = device == d
        first, last = int(starts[on].min()), int(ends[on].max())
        if first < start_ts - tolerance_ns or last > end_ts + tolerance_ns:
            out.append(
                f"the activity records of GPU {d} span CUPTI timestamps {first}..{last}, outside the "
                f"calibrated interval {start_ts}..{end_ts}: that device's kernel start and end times may be "
                "off the host clock in the trace (durations are unaffected); check it against a torch.profiler trace"
            )
    return out
