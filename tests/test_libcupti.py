"""Which CUPTI the profiler uses (``collection/libcupti.py``) and the record layout the compiled decoder
picks from the libcupti it opens (CUDA 12.6+: Kernel9, 13.x: Kernel10), without a GPU or a driver.

The layout choice is tested against stand-in libcupti builds with a chosen soname and CUPTI API
version (compiled here with the system C compiler), each loaded in a fresh interpreter: ``load()``
keeps the first library it opens. The major comes from the soname (``cuptiGetVersion`` fails or
crashes without a driver on CUPTI 13.x); the version is asked of CUPTI 12 (for its 12.6 minimum) and
of a library without a soname.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixture_models import cupti_native, needs_native

from aitune_dispatch.collection import cupti_source, libcupti

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("major", [12, 13])
def test_install_hint_names_the_extra_and_the_cupti_python_range_of_that_major(major: int):
    hint = libcupti.install_hint(major)
    assert f"pip install 'aitune-dispatch[cu{major}]'" in hint
    assert f"pip install 'cupti-python>={libcupti.MIN_CUPTI_PYTHON[major]},<{major + 1}'" in hint


@pytest.mark.parametrize(
    ("torch_major", "installed", "fits"),
    [
        (12, "12.8.0", True),
        (12, "12.6.0", True),
        (13, "13.0.1", True),
        (13, "13.4.0", True),
        (None, "13.0.1", True),  # a CPU torch: nothing to match
        (12, "13.0.1", False),  # the user report: cupti-python 13 beside a cu12 torch
        (13, "12.8.0", False),
        (12, "12.4.0", False),  # before 12.6
        (12, None, False),  # not installed
        (14, "14.0.0", False),  # a CUDA major the decoder has no layout for
    ],
)
def test_cupti_python_must_match_torchs_cuda_major(torch_major: int | None, installed: str | None, fits: bool):
    problem = libcupti.cupti_python_problem(torch_major, installed)
    assert (problem is None) is fits, problem
    if not fits and torch_major in (12, 13):
        assert f"aitune-dispatch[cu{torch_major}]" in problem


def test_the_activity_source_refuses_a_cupti_python_of_the_other_major(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(libcupti, "torch_cuda_major", lambda: 12)
    monkeypatch.setattr(libcupti, "cupti_python_version", lambda: "13.0.1")
    with pytest.raises(RuntimeError, match=r"cupti-python 13\.0\.1 does not match this CUDA 12 torch.*\[cu12\]"):
        cupti_source.load_cupti()
    monkeypatch.setattr(libcupti, "cupti_python_version", lambda: None)
    with pytest.raises(RuntimeError, match=r"cupti-python is not installed.*cupti-python>=12\.6,<13"):
        cupti_source.load_cupti()


@pytest.mark.parametrize("major", [12, 13])
def test_candidates_are_of_torchs_cuda_major_only(major: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(libcupti, "loaded_libcupti", lambda: None)
    candidates = libcupti.libcupti_candidates(major)
    assert candidates[-1] == f"libcupti.so.{major}"
    assert all(Path(c).name == f"libcupti.so.{major}" for c in candidates), candidates
    wheel = libcupti.wheel_libcupti(major)
    assert candidates[0] == (wheel or f"libcupti.so.{major}")
    # a libcupti already in the process comes first, whatever its major: never a second copy
    monkeypatch.setattr(libcupti, "loaded_libcupti", lambda: "libcupti.so.13")
    assert libcupti.libcupti_path(major) == "libcupti.so.13"


def test_a_cpu_torch_may_use_either_major_newest_first(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(libcupti, "loaded_libcupti", lambda: None)
    monkeypatch.setattr(libcupti, "torch_cuda_major", lambda: None)
    candidates = libcupti.libcupti_candidates()
    assert candidates[-2:] == ["libcupti.so.13", "libcupti.so.12"], candidates


STUB = """
#include <stdint.h>
#ifdef VERSION
int cuptiGetVersion(uint32_t *version) { *version = VERSION; return 0; }
#endif
int cuptiActivityRegisterCallbacks(void *requested, void *completed) { return 0; }
int cuptiActivityGetNextRecord(uint8_t *buffer, unsigned long valid, void **record) { return 0; }
"""


def _stub(tmp_path: Path, version: int | None, soname: str | None) -> Path:
    """A stand-in libcupti: the three functions load() needs, ``cuptiGetVersion`` answering ``version``
    (absent for None), and ``soname`` as its DT_SONAME (none for None)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a stand-in libcupti")
    source = tmp_path / "stub.c"
    source.write_text(STUB)
    library = tmp_path / (soname or "libcupti-stub.so")
    flags = [] if version is None else [f"-DVERSION={version}u"]
    flags += [] if soname is None else [f"-Wl,-soname,{soname}"]
    subprocess.run([compiler, "-shared", "-fPIC", *flags, "-o", str(library), str(source)], check=True)
    return library


def _load_in_fresh_interpreter(library: Path) -> subprocess.CompletedProcess:
    script = textwrap.dedent(
        f"""
        from aitune_dispatch.collection import _cupti_native as native
        assert native.library() is None and native.cupti_version() is None
        before = native.record_sizes()[10]  # before load: the headers' layout
        assert before == {{12: 208, 13: 216}}[native.CUPTI_HEADER_MAJOR], before
        try:
            path = native.load({str(library)!r})
        except OSError as error:
            print("refused:", error)
        else:
            assert path == native.library(), (path, native.library())
            sizes = native.record_sizes()
            print("loaded", native.cupti_version(), native.cupti_major(), sizes[10], sizes[3], sizes[1])
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)


@needs_native
@pytest.mark.parametrize(
    ("soname", "version", "expected"),
    [
        ("libcupti.so.12", 24, "24 12 208"),  # CUDA 12.6
        ("libcupti.so.12", 28, "28 12 208"),
        ("libcupti.so.12", None, "None 12 208"),  # no version to check: the soname's layout
        ("libcupti.so.13", 130001, "None 13 216"),  # 13.x is never asked (it may crash without a driver)
        ("libcupti.so.13", None, "None 13 216"),
        (None, 26, "26 12 208"),  # no soname: the version tells
        (None, 130500, "130500 13 216"),
    ],
)
def test_the_kernel_layout_follows_the_cupti_loaded(tmp_path: Path, soname: str | None, version: int | None, expected):
    # whichever headers it was built with (12.6+ or 13.x), the decoder sizes kernel records for the CUPTI it runs on
    run = _load_in_fresh_interpreter(_stub(tmp_path, version, soname))
    assert run.returncode == 0, run.stdout + run.stderr
    kernel_bytes = expected.split()[-1]
    assert run.stdout.split() == ["loaded", *expected.split(), kernel_bytes, "96"], run.stdout


@needs_native
@pytest.mark.parametrize(
    ("soname", "version", "reason"),
    [
        ("libcupti.so.12", 23, "CUPTI 12 (API version 23)"),  # CUDA 12.5: before 12.6
        ("libcupti.so.14", None, "CUPTI 14"),
        (None, 140000, "CUPTI 14"),
        ("libcupti.so.11", None, "CUPTI 11"),
        (None, None, "neither its soname"),
    ],
)
def test_a_cupti_without_a_known_layout_is_refused(tmp_path: Path, soname: str | None, version: int | None, reason):
    run = _load_in_fresh_interpreter(_stub(tmp_path, version, soname))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("refused:") and reason in run.stdout, run.stdout
    assert "CUDA 12.6+ or 13.x" in run.stdout, run.stdout


@needs_native
def test_the_native_module_names_no_soname_of_its_own():
    # the C side opens what Python hands it (libcupti.libcupti_path), so no soname is compiled in
    assert not hasattr(cupti_native, "CUPTI_SONAME")
