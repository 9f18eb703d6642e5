"""Several GPUs in one process: which devices a pass used, their properties, and one clock for all.

CUPTI is one per process: one activity session records the kernels of every device, each record
carrying its ``deviceId`` (the CUDA ordinal, as in ``cuda:<n>``), and CUPTI puts the timestamps of
every device on one clock, the one ``cuptiGetTimestamp`` reads. So one pair of clock readings
calibrates every device, and what must cover every device is the rest of the run's bracket:
synchronising before and after the pass, the canary kernel that proves our callbacks still own
CUPTI, and the check that each device's records lie inside the calibrated interval.

A device is *in use* when its primary CUDA context exists (torch creates it on the device's first
allocation or launch); asking never creates one. With one GPU in use everything here reduces to
the current device, so a single-GPU run does exactly what it did before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .. import schema

# a device's records may start or end this far outside the calibrated interval before we warn
# (CUPTI converts GPU timestamps to its clock with an error of a few microseconds)
CLOCK_TOLERANCE_NS = 100_000


def devices_in_use() -> tuple[int, ...]:
    """The CUDA devices of this process that have a context, the current device first.

    Returns
    -------
    tuple[int, ...]
        Device ordinals (as in ``cuda:<n>``); empty where CUDA is unavailable. Where this torch
        cannot say which devices have a context, only the current device.
    """
    if not torch.cuda.is_available():
        return ()
    current = int(torch.cuda.current_device())
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
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
    """A GPU's name, compute capability, memory and SM count (the trace's deviceProperties), under
    the metadata keys ``schema.META_GPU_NAME``, ``META_GPU_CAPABILITY`` (``"9.0"``), ``META_GPU_MEMORY``
    (bytes) and ``META_GPU_SMS``."""
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
    """``result.metadata`` entries for a pass whose kernels ran on more than one GPU.

    Parameters
    ----------
    activity:
        The joined activity of the pass (a ``device`` column).

    Returns
    -------
    dict[str, str]
        ``gpu_devices`` (``"0,1"``) and ``gpu_properties`` (JSON ``{"0": {"gpu_name": ...}, ...}``);
        empty when at most one GPU ran kernels (the single-GPU keys ``gpu_name``... describe it).
    """
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
    """Warnings for devices whose records lie outside the calibrated interval (several GPUs only).

    Parameters
    ----------
    kernels:
        Activity records in CUPTI's clock, before conversion (schema ``KERNELS``).
    start_ts, end_ts:
        The CUPTI timestamps of the two calibration readings: before the pass, and after every
        device was synchronised at its end.
    tolerance_ns:
        How far outside the interval (in CUPTI ticks, nanoseconds unless a client changed the clock)
        a record may lie.

    Returns
    -------
    list[str]
        One sentence per device whose earliest start or latest end falls outside
        ``[start_ts - tolerance, end_ts + tolerance]``; empty with one device, since every device's
        timestamps are then on the clock that was calibrated.
    """
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
