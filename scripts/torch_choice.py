"""The decisions of scripts/setup.sh about torch, in one place it and the tests share (stdlib only).

``python scripts/torch_choice.py index``
    prints the index to install torch from (an empty line: pip's default index) and says why on
    stderr. Without a GPU (no ``nvidia-smi``, no ``/dev/nvidia0``, no ``/proc/driver/nvidia``) it is
    the PyTorch CPU wheel index where that answers within a few seconds, else the default index.
    ``AITUNE_DISPATCH_TORCH_INDEX`` names another index (used where it answers, GPU or not), or
    ``default`` (or empty) for pip's default index without probing; ``AITUNE_DISPATCH_GPU=1``/``0``
    overrides the GPU detection; ``AITUNE_DISPATCH_TORCH_INDEX_TIMEOUT`` is the probe's timeout.
``python scripts/torch_choice.py describe REPORT``
    reads the report of ``pip install --dry-run --report REPORT torch==...`` and says what will be
    downloaded: torch's wheel file, whether it is a CPU or a CUDA build, its size where known, and
    what else comes with it.
``python scripts/torch_choice.py extras``
    prints the extras to install the package with: ``test``, plus ``cu12``/``cu13`` where the
    torch of this interpreter is a CUDA build of that major version (nothing CUDA for a CPU build).
``python scripts/torch_choice.py pin``
    prints the pip constraint that keeps the torch of this interpreter (``torch==2.15.0``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
INDEX_ENV = "AITUNE_DISPATCH_TORCH_INDEX"
GPU_ENV = "AITUNE_DISPATCH_GPU"
TIMEOUT_ENV = "AITUNE_DISPATCH_TORCH_INDEX_TIMEOUT"
DEFAULT_TIMEOUT = 5.0
CUDA_PACKAGE = re.compile(r"^(nvidia-|cuda-toolkit$|cuda-bindings$|cuda-python$)")


def has_nvidia_gpu(root: str = "/") -> bool:
    """Whether this machine shows an NVIDIA driver: ``nvidia-smi`` on PATH, a device node or the driver's proc entry."""
    forced = os.environ.get(GPU_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    if shutil.which("nvidia-smi"):
        return True
    base = Path(root)
    return (base / "dev/nvidia0").exists() or (base / "proc/driver/nvidia/version").exists()


def index_reachable(url: str, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Whether the index answers at all within ``timeout`` seconds (a file:// index: whether the folder is there)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path)).is_dir()
    if parsed.scheme not in ("http", "https"):
        return False
    probe = url.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(urllib.request.Request(probe, method="HEAD"), timeout=timeout) as answer:
            return answer.status < 400
    except (OSError, ValueError):  # URLError and HTTPError are OSErrors; a timeout too
        return False


def choose_index(env: dict[str, str] | None = None, gpu: bool | None = None) -> tuple[str, str]:
    """The index to install torch from ("" for pip's default index) and the reason, in words."""
    env = dict(os.environ) if env is None else env
    gpu = has_nvidia_gpu() if gpu is None else gpu
    timeout = float(env.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)
    asked = env.get(INDEX_ENV)
    if asked is not None and asked.strip().lower() in ("", "default"):
        return "", f"{INDEX_ENV}={asked!r}: pip's default index"
    if asked is not None:
        if index_reachable(asked, timeout):
            return asked, f"{INDEX_ENV}: {asked}"
        return "", f"{INDEX_ENV}={asked} does not answer within {timeout:g}s: pip's default index instead"
    if gpu:
        return "", "an NVIDIA GPU is present: pip's default index (its Linux torch is a CUDA build)"
    if index_reachable(CPU_INDEX, timeout):
        return CPU_INDEX, f"no GPU here: the PyTorch CPU index {CPU_INDEX}"
    return "", (
        f"no GPU here, but the PyTorch CPU index {CPU_INDEX} does not answer within {timeout:g}s: "
        f"pip's default index instead (set {INDEX_ENV} to a CPU index that is reachable)"
    )


def _size(url: str, timeout: float) -> int | None:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = Path(urllib.request.url2pathname(parsed.path))
        return path.stat().st_size if path.is_file() else None
    if parsed.scheme not in ("http", "https"):
        return None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout) as answer:
            length = answer.headers.get("Content-Length")
            return int(length) if length and length.isdigit() else None
    except (OSError, ValueError):
        return None


def cuda_of(torch_item: dict[str, Any], names: set[str]) -> str | None:
    """The CUDA version a torch build in a pip report is for ("13.0", "12", "" where unknown), None for a CPU build.

    A local version label says it (``+cpu``, ``+cu130``); without one (PyPI's wheels) a CUDA build is
    the one that brings ``nvidia-*`` / ``cuda-toolkit`` packages, of the major their names carry.
    """
    version = torch_item["metadata"]["version"]
    local = version.partition("+")[2]
    if local.startswith("cpu"):
        return None
    match = re.fullmatch(r"cu(\d+)(\d)", local)
    if match:
        return f"{match.group(1)}.{match.group(2)}"
    required = {
        re.split(r"[\s;<>=!~\[(]", spec, maxsplit=1)[0].lower()
        for spec in torch_item["metadata"].get("requires_dist") or []
        if "extra ==" not in spec
    }
    cuda_names = {name for name in names | required if CUDA_PACKAGE.match(name)}
    if not cuda_names:
        return None
    majors = sorted({m.group(1) for name in cuda_names if (m := re.search(r"-cu(\d+)$", name))}, key=int)
    return majors[-1] if majors else ""


def describe(report: dict[str, Any], timeout: float = DEFAULT_TIMEOUT) -> list[str]:
    """What a ``pip install --dry-run --report`` of torch is about to download, in lines for the terminal."""
    items = report.get("install") or []
    torch_items = [item for item in items if item["metadata"]["name"].lower() == "torch"]
    if not torch_items:
        return ["setup: pip would install no torch (one that satisfies the pin is there already)"]
    urls = [item.get("download_info", {}).get("url", "") for item in items]
    with ThreadPoolExecutor(max_workers=8) as pool:
        sizes = list(pool.map(lambda url: _size(url, timeout), urls))
    names = {item["metadata"]["name"].lower() for item in items}
    torch_item = torch_items[0]
    index = items.index(torch_item)
    url = urls[index]
    wheel = urllib.parse.unquote(url.rsplit("/", 1)[-1]) or "(no file name in the report)"
    cuda = cuda_of(torch_item, names)
    build = "CPU build" if cuda is None else (f"CUDA {cuda} build" if cuda else "CUDA build")
    where = "from local disk" if url.startswith("file:") else f"from {urllib.parse.urlparse(url).netloc}"
    lines = [f"setup: torch {torch_item['metadata']['version']}: {wheel} ({build}, {_mb(sizes[index])}, {where})"]
    others = [i for i in range(len(items)) if i != index]
    if others:
        cuda_count = sum(1 for i in others if CUDA_PACKAGE.match(items[i]["metadata"]["name"].lower()))
        known = [sizes[i] for i in others if sizes[i] is not None]
        local = sum(1 for i in others if urls[i].startswith("file:"))
        lines.append(
            f"setup: with {len(others)} more packages ({cuda_count} of them nvidia/CUDA ones, "
            f"{local} from local disk), {_mb(sum(known))} where known"
            + (f" ({len(others) - len(known)} of unknown size)" if len(known) < len(others) else "")
        )
        total = [s for s in sizes if s is not None]
        lines.append(f"setup: in all {_mb(sum(total))} for {len(items)} packages, downloaded or copied from local disk")
    return lines


def _mb(size: int | None) -> str:
    if size is None:
        return "size unknown"
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"


def extras(cuda: str | None) -> str:
    """The package's extras for a torch built for CUDA ``cuda`` (``torch.version.cuda``; None: a CPU build)."""
    if not cuda:
        return "test"
    return f"test,cu{cuda.split('.')[0]}"


def pin(version: str) -> str:
    """The pip constraint that keeps the torch of ``version`` (``torch.__version__``): its public version,
    since a local label such as ``+cu132``, which no index serves, makes pip give up."""
    return f"torch=={version.partition('+')[0]}"


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "index":
        index, reason = choose_index()
        print(f"setup: torch index: {reason}", file=sys.stderr)
        print(index)
        return 0
    if command == "describe" and len(argv) == 2:
        timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)
        print("\n".join(describe(json.loads(Path(argv[1]).read_text()), timeout)))
        return 0
    if command == "extras":
        import torch

        print(extras(torch.version.cuda))
        return 0
    if command == "pin":
        import torch

        print(pin(torch.__version__))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
