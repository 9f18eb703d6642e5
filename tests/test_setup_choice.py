"""scripts/setup.sh's choice of torch (scripts/torch_choice.py): which index, what it says it downloads, which extras.

The index is probed: a CPU index that answers is used on a machine without a GPU, one that does not
is replaced by pip's default index, and setup.sh hands the choice to pip; a torch already there is
never installed over. Servers here are local (http.server on 127.0.0.1), unreachable ones a closed port.
"""

from __future__ import annotations

import http.server
import importlib.util
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "torch_choice.py"
pytestmark = pytest.mark.single_backend  # no profiling here: once, not once per tracing backend
_spec = importlib.util.spec_from_file_location("torch_choice", SCRIPT)
assert _spec and _spec.loader
choice = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(choice)


@pytest.fixture
def served_index(tmp_path):
    """A reachable index: an HTTP server on 127.0.0.1 serving a folder with ``torch/``."""
    (tmp_path / "torch").mkdir()
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_index():
    """An unreachable index: a port that was free a moment ago, nothing listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def test_without_a_gpu_the_cpu_index_is_used_where_it_answers(monkeypatch, served_index, closed_index):
    monkeypatch.setattr(choice, "CPU_INDEX", served_index)
    assert choice.choose_index({}, gpu=False)[0] == served_index
    monkeypatch.setattr(choice, "CPU_INDEX", closed_index)
    index, reason = choice.choose_index({}, gpu=False)
    assert index == "" and "does not answer" in reason  # pip's default index, and it says why


def test_with_a_gpu_the_default_index_serves_its_cuda_build(monkeypatch, served_index):
    monkeypatch.setattr(choice, "CPU_INDEX", served_index)
    index, reason = choice.choose_index({}, gpu=True)
    assert index == "" and "GPU" in reason


def test_the_environment_names_another_index_or_the_default(served_index, closed_index, tmp_path):
    env = choice.INDEX_ENV
    for gpu in (False, True):
        assert choice.choose_index({env: served_index}, gpu=gpu)[0] == served_index
        assert choice.choose_index({env: closed_index}, gpu=gpu)[0] == ""
        assert choice.choose_index({env: "default"}, gpu=gpu)[0] == ""
        assert choice.choose_index({env: ""}, gpu=gpu)[0] == ""
    assert choice.choose_index({env: tmp_path.as_uri()}, gpu=False)[0] == tmp_path.as_uri()  # a local folder index
    assert choice.choose_index({env: (tmp_path / "absent").as_uri()}, gpu=False)[0] == ""


def test_a_gpu_is_seen_by_its_device_node_or_driver(monkeypatch, tmp_path):
    monkeypatch.delenv(choice.GPU_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no nvidia-smi
    assert not choice.has_nvidia_gpu(str(tmp_path))
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    assert choice.has_nvidia_gpu(str(tmp_path))
    monkeypatch.setenv(choice.GPU_ENV, "0")
    assert not choice.has_nvidia_gpu(str(tmp_path))


def _item(name, version, path, requires=()):
    return {
        "metadata": {"name": name, "version": version, "requires_dist": list(requires)},
        "download_info": {"url": Path(path).as_uri()},
    }


def _wheel(tmp_path, name, size):
    path = tmp_path / name
    path.write_bytes(b"\0" * size)
    return path


def test_the_report_names_the_wheel_its_build_and_size(tmp_path):
    cpu = _wheel(tmp_path, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", 3_000_000)
    lines = choice.describe({"install": [_item("torch", "2.13.0+cpu", cpu)]})
    assert cpu.name in lines[0] and "CPU build" in lines[0] and choice._mb(cpu.stat().st_size) in lines[0]

    tagged = _wheel(tmp_path, "torch-2.13.0+cu130-cp313-cp313-manylinux_2_28_x86_64.whl", 10)
    assert "CUDA 13.0 build" in choice.describe({"install": [_item("torch", "2.13.0+cu130", tagged)]})[0]

    # PyPI's Linux wheel has no local label: its nvidia-* requirements make it a CUDA build
    plain = _wheel(tmp_path, "torch-2.8.0-cp310-cp310-manylinux_2_28_x86_64.whl", 5_000_000)
    runtime = _wheel(tmp_path, "nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.whl", 7_000_000)
    requires = ['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"', 'optree>=0.13.0; extra == "optree"']
    report = {
        "install": [_item("torch", "2.8.0", plain, requires), _item("nvidia-cuda-runtime-cu12", "12.8.90", runtime)]
    }
    lines = choice.describe(report)
    assert "CUDA 12 build" in lines[0] and plain.name in lines[0]
    assert "1 more packages (1 of them nvidia/CUDA ones" in lines[1]
    assert choice._mb(plain.stat().st_size + runtime.stat().st_size) in lines[-1]


def test_nothing_to_download_where_torch_satisfies_the_pin():
    assert "no torch" in choice.describe({"install": []})[0]


def test_extras_follow_the_cuda_major_of_torch():
    assert choice.extras(None) == "test"
    assert choice.extras("12.8") == "test,cu12"
    assert choice.extras("13.2") == "test,cu13"


def test_the_pin_keeps_the_present_torch_by_its_public_version():
    # a local label (+cu132) no index serves would make pip give up on the constraint
    assert choice.pin("2.15.0+cu132") == "torch==2.15.0"
    assert choice.pin("2.13.0") == "torch==2.13.0"


def test_the_command_line_prints_the_index_and_says_why(closed_index):
    env = dict(os.environ, **{choice.INDEX_ENV: closed_index})
    done = subprocess.run([sys.executable, str(SCRIPT), "index"], env=env, capture_output=True, text=True, check=True)
    assert done.stdout == "\n" and closed_index in done.stderr


FAKE_PYTHON = r"""#!/usr/bin/env bash
# stands in for PYTHON in scripts/setup.sh: logs each call; torch "appears" once pip installs it
echo "$*" >>"$STATE/calls"
case "$*" in
  *torch_choice.py\ extras) echo test ;;
  *torch_choice.py*) exec "$REAL_PYTHON" "$@" ;;
  "-c import torch") [ -f "$STATE/torch" ] ;;
  *"pip install --dry-run"*) shift 6; echo '{"install": []}' >"$1" ;;
  *"pip install"*torch==*) touch "$STATE/torch" ;;
  *) echo fake ;;
esac
"""


def _setup_with_fake_python(tmp_path, env_extra, torch_present):
    state = tmp_path / "state"
    state.mkdir(parents=True)
    if torch_present:
        (state / "torch").touch()
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake), STATE=str(state), REAL_PYTHON=sys.executable, **env_extra)
    env.pop(choice.GPU_ENV, None)
    subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], env=env, check=True, capture_output=True, text=True)
    return (state / "calls").read_text().splitlines()


def test_setup_installs_torch_from_the_index_it_chose(tmp_path, served_index, closed_index):
    calls = _setup_with_fake_python(tmp_path / "a", {choice.INDEX_ENV: served_index}, torch_present=False)
    installs = [c for c in calls if c.startswith("-m pip install") and "torch==" in c]
    assert len(installs) == 2 and all(f"--index-url {served_index}" in c for c in installs)  # dry run, then install
    calls = _setup_with_fake_python(tmp_path / "b", {choice.INDEX_ENV: closed_index}, torch_present=False)
    installs = [c for c in calls if c.startswith("-m pip install") and "torch==" in c]
    assert len(installs) == 2 and not any("--index-url" in c for c in installs)


def test_setup_never_installs_over_a_torch_that_is_there(tmp_path):
    calls = _setup_with_fake_python(tmp_path, {}, torch_present=True)
    assert not [c for c in calls if c.startswith("-m pip install") and "torch==" in c]
    package = [c for c in calls if "-e .[test]" in c]
    assert package and all(" -c " in c for c in package)  # constrained to the torch present
