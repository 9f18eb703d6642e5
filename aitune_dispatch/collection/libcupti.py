"""Which CUPTI this process uses: the one place that names libcupti's sonames and wheel paths, and
that checks cupti-python against torch's CUDA major (``native_shims/README.md``, "Which libcupti").

CUDA 12.6+ and 13.x are supported. A libcupti already in the process (torch loads its own) always
wins, so no second copy is ever loaded; otherwise the CUPTI wheel of torch's CUDA major is used
(``nvidia-cuda-cupti-cu12`` puts ``libcupti.so.12`` in ``nvidia/cuda_cupti/lib``, ``nvidia-cuda-cupti``
puts ``libcupti.so.13`` in ``nvidia/cu13/lib`` or ``nvidia/cuda_cupti/lib``), never the other major's.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import importlib.util
import os
from pathlib import Path

CUDA_MAJORS = (13, 12)  # the CUDA / CUPTI majors supported, newest first
MIN_CUPTI_PYTHON = {12: "12.6", 13: "13.0"}
_WHEEL_LIB_DIRS = {12: ("cuda_cupti/lib",), 13: ("cu13/lib", "cuda_cupti/lib")}


def soname(major: int) -> str:
    """The soname of the libcupti of a CUDA major, ``libcupti.so.<major>``."""
    return f"libcupti.so.{major}"


def torch_cuda_major() -> int | None:
    """The CUDA major torch was built with, or None for a CPU (or ROCm) build or without torch."""
    try:
        import torch
    except ImportError:
        return None
    version = getattr(torch.version, "cuda", None)
    try:
        return int(str(version).split(".")[0]) if version else None
    except ValueError:
        return None


def cupti_python_version() -> str | None:
    """The installed cupti-python's version, or None where it is not installed."""
    try:
        return importlib.metadata.version("cupti-python")
    except importlib.metadata.PackageNotFoundError:
        return None


def install_hint(major: int | None) -> str:
    """The pip command that installs the cupti-python of a CUDA major (both choices where it is unknown)."""
    if major in MIN_CUPTI_PYTHON:
        return (
            f"`pip install 'aitune-dispatch[cu{major}]'` "
            f"(or `pip install 'cupti-python>={MIN_CUPTI_PYTHON[major]},<{major + 1}'`)"
        )
    return (
        "`pip install 'aitune-dispatch[cu13]'` for a CUDA 13 torch, `pip install 'aitune-dispatch[cu12]'` "
        "for a CUDA 12 one"
    )


def cupti_python_problem(torch_major: int | None = None, installed: str | None = None) -> str | None:
    """Why the installed cupti-python does not fit torch's CUDA major (missing, another major, too old),
    with the pip command that fixes it; None where it fits or torch has no CUDA.

    Checked before cupti-python is imported: importing one of another major loads that major's
    libcupti next to torch's, two CUPTIs in one process."""
    if torch_major is None:
        return None
    if installed is None:
        return f"cupti-python is not installed; the CUDA {torch_major} torch needs it: {install_hint(torch_major)}"
    try:
        parts = tuple(int(p) for p in installed.split(".")[:2])
    except ValueError:
        return None  # a local build with an unusual version: nothing to compare
    if torch_major not in MIN_CUPTI_PYTHON:
        return (
            f"torch is built with CUDA {torch_major}; aitune-dispatch supports CUDA 12.6+ and 13.x torch builds "
            f"(installed cupti-python {installed})"
        )
    least = tuple(int(p) for p in MIN_CUPTI_PYTHON[torch_major].split("."))
    if parts[0] != torch_major or parts < least:
        return (
            f"cupti-python {installed} does not match this CUDA {torch_major} torch (it would load another "
            f"libcupti than torch's); install the matching one: {install_hint(torch_major)}"
        )
    return None


def _loaded(name: str) -> bool:
    """Whether a library of this soname is in the process already (never loads one)."""
    try:
        ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


def loaded_libcupti() -> str | None:
    """The soname of a libcupti already in the process (any supported major, or unversioned), or None."""
    for name in [soname(m) for m in CUDA_MAJORS] + ["libcupti.so"]:
        if _loaded(name):
            return name
    return None


@functools.lru_cache(maxsize=4)
def wheel_libcupti(major: int) -> str | None:
    """The libcupti file of a CUDA major's CUPTI wheel in the ``nvidia`` namespace package, or None.

    Looked up once per process: the namespace-package search would otherwise be paid by every source
    built and every observed graph capture (a fraction of a millisecond each)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in _WHEEL_LIB_DIRS.get(major, ()):
            path = Path(root) / sub / soname(major)
            if path.is_file():
                return str(path)
    return None


def candidate_majors(torch_major: int | None = None) -> tuple[int, ...]:
    """The CUDA majors whose libcupti may be loaded: torch's alone where it has CUDA, else every supported one."""
    major = torch_major if torch_major is not None else torch_cuda_major()
    return (major,) if major is not None else CUDA_MAJORS


def libcupti_candidates(torch_major: int | None = None) -> list[str]:
    """Where libcupti is looked for, in order: a copy already in the process, then each CUDA major's wheel
    file, then its soname through the loader's search path (only torch's major where torch has CUDA)."""
    majors = candidate_majors(torch_major)  # first: importing torch loads its libcupti
    loaded = loaded_libcupti()
    wheels = [path for path in (wheel_libcupti(m) for m in majors) if path]
    return ([loaded] if loaded else []) + wheels + [soname(m) for m in majors]


def libcupti_path(torch_major: int | None = None) -> str:
    """The libcupti to open: the first of :func:`libcupti_candidates` (the C side opens just that one)."""
    return libcupti_candidates(torch_major)[0]
