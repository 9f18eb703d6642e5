"""What a GPU can do at best: peak dense FLOP/s per dtype and memory bandwidth, by device name.

The figures are the vendors' datasheet figures for dense math (half the "with sparsity" figures
the datasheets headline), each row naming its source. float32 is the CUDA cores' rate: PyTorch
runs float32 matmuls without TF32 unless ``torch.backends.cuda.matmul.allow_tf32`` is set, and a
run records which it was (``schema.META_ALLOW_TF32``), so :func:`peak_flops` then takes the TF32
tensor-core rate. A device this table does not know has no limits (every fraction of the bound is
unknown, never guessed). The roofline view reads these; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

TERA = 1e12


@dataclass(frozen=True)
class DeviceLimits:
    """One GPU's peak rates.

    Attributes
    ----------
    name:
        The product, as the datasheet names it.
    matches:
        Substrings of ``torch.cuda.get_device_name()`` that select this row (the first row whose
        every substring is in the name wins).
    flops:
        Peak dense FLOP/s per dtype name (``"bfloat16"``, ``"float16"``, ``"float32"``,
        ``"tf32"``, ``"float64"``, ``"float8_e4m3fn"``).
    bandwidth:
        Peak memory bandwidth, bytes/s.
    source:
        Where the figures come from.
    """

    name: str
    matches: tuple[str, ...]
    flops: Mapping[str, float] = field(default_factory=dict)
    bandwidth: float = 0.0
    source: str = ""


def _rates(**tflops: float) -> Mapping[str, float]:
    names = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "tf32", "fp64": "float64"}
    names |= {"fp8": "float8_e4m3fn"}
    return MappingProxyType({names[key]: value * TERA for key, value in tflops.items()})


_HOPPER = {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0, "fp64": 67.0, "fp8": 1979.0}
LIMITS: tuple[DeviceLimits, ...] = (
    DeviceLimits(
        "H200 SXM", ("H200",), _rates(**_HOPPER), 4.8 * TERA,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM); FP64 is the FP64 Tensor Core figure",
    ),
    DeviceLimits(
        "H100 PCIe", ("H100", "PCIe"),
        _rates(bf16=756.5, fp16=756.5, tf32=378.0, fp32=51.0, fp64=51.0, fp8=1513.0), 2.0 * TERA,
        "NVIDIA H100 Tensor Core GPU datasheet (PCIe)",
    ),
    DeviceLimits(
        "H100 SXM", ("H100",), _rates(**_HOPPER), 3.35 * TERA,
        "NVIDIA H100 Tensor Core GPU datasheet (SXM)",
    ),
    DeviceLimits(
        "B200", ("B200",), _rates(bf16=2250.0, fp16=2250.0, tf32=1100.0, fp32=75.0, fp64=37.0, fp8=4500.0),
        8.0 * TERA, "NVIDIA HGX B200 datasheet, per GPU (one eighth of the eight-GPU figures)",
    ),
    DeviceLimits(
        "A100 SXM 80GB", ("A100", "80GB"), _rates(bf16=312.0, fp16=312.0, tf32=156.0, fp32=19.5, fp64=19.5),
        2.039 * TERA, "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB; PCIe 80GB: 1.935 TB/s)",
    ),
    DeviceLimits(
        "A100 40GB", ("A100",), _rates(bf16=312.0, fp16=312.0, tf32=156.0, fp32=19.5, fp64=19.5),
        1.555 * TERA, "NVIDIA A100 Tensor Core GPU datasheet (40GB)",
    ),
    DeviceLimits(
        "L40S", ("L40S",), _rates(bf16=362.05, fp16=362.05, tf32=183.0, fp32=91.6, fp8=733.0),
        0.864 * TERA, "NVIDIA L40S GPU datasheet",
    ),
)  # fmt: skip


def limits_for(device_name: str | None) -> DeviceLimits | None:
    """The limits of the GPU named ``device_name`` (``torch.cuda.get_device_name()``), or None.

    Parameters
    ----------
    device_name:
        The name a run recorded (``result.metadata["gpu_name"]``); None for a CPU run.

    Returns
    -------
    DeviceLimits or None
        The first row of :data:`LIMITS` whose every ``matches`` substring is in the name.
    """
    if not device_name:
        return None
    return next((row for row in LIMITS if all(part in device_name for part in row.matches)), None)


def peak_flops(limits: DeviceLimits | None, dtype: str | None, allow_tf32: bool = False) -> float | None:
    """Peak dense FLOP/s of ``dtype`` on that device; None where either is unknown.

    Parameters
    ----------
    limits:
        The device's row, or None.
    dtype:
        The call's compute dtype (``"bfloat16"``...).
    allow_tf32:
        float32 matmuls ran on TF32 tensor cores.

    Returns
    -------
    float or None
    """
    if limits is None or dtype is None:
        return None
    key = "tf32" if dtype == "float32" and allow_tf32 else dtype
    return limits.flops.get(key)
