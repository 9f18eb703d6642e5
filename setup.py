"""Build of the compiled CUPTI decoder ``aitune_dispatch.collection._cupti_native`` (``native_shims/``).

Every other setting lives in pyproject.toml. The extension compiles against CUPTI 12.6+ or 13.x
headers: those of the ``nvidia-cuda-cupti`` wheel and ``cuda.h`` of the ``nvidia-cuda-runtime`` wheel
(the build requirements; ``nvidia/cu13/include`` once installed), or of ``nvidia-cuda-cupti-cu12`` /
``nvidia-cuda-runtime-cu12`` (``nvidia/cuda_cupti/include``, ``nvidia/cuda_runtime/include``), no CUDA
toolkit needed. Either build decodes both CUPTI 12 and 13 (the record layout follows the libcupti
loaded at run time, native_shims/README.md). It never links libcupti, and is optional: where it
cannot build, the package installs without it and the profiler falls back to cupti-python with a
warning. ``AITUNE_DISPATCH_NATIVE=off`` skips it, ``=require`` makes a failed build an error;
``CUPTI_INCLUDE_DIR`` / ``CUDA_HOME`` point at headers elsewhere.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

from setuptools import Extension, setup

SOURCES = ["native_shims/cupti_decoder.c", "native_shims/cupti_callbacks.c"]
SHARED_HEADER = "native_shims/cupti_shared.h"
TRACER_SOURCES = sorted(str(p) for p in Path("native_shims/tracer").glob("*.cpp"))
TRACER_HEADERS = sorted(str(p) for p in Path("native_shims/tracer").glob("*.h"))
COMPAT = "native_shims/compat"  # a stand-in builtin_types.h, searched first (see the file)
NVIDIA_SUBDIRS = ("cu13/include", "cuda_cupti/include", "cuda_runtime/include")


def _nvidia_include_dirs() -> list[Path]:
    """Include folders of the installed ``nvidia-*`` wheels (a namespace package)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [Path(root) / sub for root in roots for sub in NVIDIA_SUBDIRS]


def _toolkit_include_dirs() -> list[Path]:
    """Include folders of a CUDA toolkit, if one is installed."""
    homes = [os.environ.get(name) for name in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    dirs: list[Path] = []
    for home in filter(None, homes):
        dirs += [Path(home) / "include", Path(home) / "extras" / "CUPTI" / "include"]
    return dirs


def _candidates() -> list[Path]:
    explicit = [Path(p) for p in os.environ.get("CUPTI_INCLUDE_DIR", "").split(os.pathsep) if p]
    return [d for d in explicit + _nvidia_include_dirs() + _toolkit_include_dirs() if d.is_dir()]


def _first_with(header: str, dirs: list[Path]) -> Path | None:
    return next((d for d in dirs if (d / header).is_file()), None)


MIN_API_VERSION_12 = 24  # CUPTI_API_VERSION of CUDA 12.6; 13.x headers count from 130000


def _cupti_api_version(include: Path) -> int:
    """``CUPTI_API_VERSION`` of the headers in ``include`` (0 where it cannot be read)."""
    text = (include / "cupti_version.h").read_text(errors="replace")
    match = re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)", text)
    return int(match.group(1)) if match else 0


def _supported_headers(version: int) -> bool:
    """CUPTI 12.6 to 12.x (API versions 24..9999) or 13.x (130000..139999): the layouts the decoder knows."""
    return MIN_API_VERSION_12 <= version < 10000 or 130000 <= version < 140000


def _include_dirs() -> tuple[list[str], str]:
    """The include folders for the extension, or an empty list and the reason."""
    dirs = _candidates()
    cupti = _first_with("cupti_activity.h", dirs)
    if cupti is None:
        return [], (
            "cupti_activity.h not found: install nvidia-cuda-cupti 13.x (or nvidia-cuda-cupti-cu12 12.6+) "
            "or set CUPTI_INCLUDE_DIR"
        )
    version = _cupti_api_version(cupti)
    if not _supported_headers(version):
        return [], (
            f"{cupti} holds CUPTI headers of API version {version}; the decoder builds against CUPTI 12.6+ "
            "(API version 24 and up) or 13.x: install nvidia-cuda-cupti 13.x or nvidia-cuda-cupti-cu12 12.6+, "
            "or set CUPTI_INCLUDE_DIR"
        )
    cuda = cupti if (cupti / "cuda.h").is_file() else _first_with("cuda.h", dirs)
    if cuda is None:
        return [], "cuda.h not found: install nvidia-cuda-runtime (13.x, or -cu12 for 12.x) or set CUDA_HOME"
    return list(dict.fromkeys([COMPAT, str(cupti), str(cuda)])), ""


def _extensions() -> list[Extension]:
    mode = os.environ.get("AITUNE_DISPATCH_NATIVE", "auto").lower()
    if mode == "off":
        return []
    if not sys.platform.startswith("linux"):
        reason = "the native CUPTI decoder is built on Linux only"
        includes: list[str] = []
    else:
        includes, reason = _include_dirs()
    if not includes:
        if mode == "require":
            raise SystemExit(f"aitune_dispatch: cannot build the native CUPTI decoder: {reason}")
        print(f"aitune_dispatch: building without the native CUPTI decoder: {reason}", file=sys.stderr)
        return []
    print(f"aitune_dispatch: native CUPTI decoder with headers from {includes}", file=sys.stderr)
    return [
        Extension(
            "aitune_dispatch.collection._cupti_native",
            sources=SOURCES,
            depends=[f"{COMPAT}/builtin_types.h", SHARED_HEADER],  # rebuilds on change, and ships in the sdist
            include_dirs=includes,
            libraries=["dl"],
            extra_compile_args=["-O2", "-std=gnu11", "-pthread", "-fvisibility=hidden", "-Wall"],
            extra_link_args=["-pthread"],
            optional=mode != "require",
        )
    ]


def _tracer() -> list[Extension]:
    """The native tracing backend, compiled against the torch of the building environment, if it has one.

    It needs torch's headers, so it builds only without build isolation (``scripts/setup.sh`` and
    ``benchmarks/gpu_run.sh`` run ``setup.py build_ext --inplace``); elsewhere the profiler uses
    the pure-Python tracing backend. ``AITUNE_DISPATCH_OP_TRACER=off`` skips it, ``=require`` makes
    a failed build an error.
    """
    mode = os.environ.get("AITUNE_DISPATCH_OP_TRACER", "auto").lower()
    if mode == "off" or not sys.platform.startswith("linux"):
        return []
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        if mode == "require":
            raise SystemExit("aitune_dispatch: the native tracer needs torch in the build environment") from None
        print(
            "aitune_dispatch: no torch in the build environment: building without the native tracer", file=sys.stderr
        )
        return []
    lib = str(Path(torch.__file__).parent / "lib")
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    return [
        Extension(
            "aitune_dispatch.tracing._tracer",
            sources=TRACER_SOURCES,
            depends=TRACER_HEADERS,
            include_dirs=cpp_extension.include_paths(),
            library_dirs=[lib],
            libraries=["c10", "torch_cpu", "torch_python"],
            language="c++",
            extra_compile_args=[
                "-O2",
                "-std=c++20",
                "-fvisibility=hidden",
                f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                f'-DAITUNE_TORCH_VERSION="{torch.__version__}"',
            ],
            extra_link_args=[f"-Wl,-rpath,{lib}"],
            optional=mode != "require",
        )
    ]


setup(ext_modules=_extensions() + _tracer())
