"""One rank of the distributed tests' job: profile a model with an all-reduce inside, save the result.

Started by ``tests/test_distributed.py`` (gloo, ``--device cpu``) and ``tests/test_multi_gpu.py``
(NCCL, ``--device cuda``), one process per rank, as torchrun starts them: ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR=127.0.0.1`` and ``MASTER_PORT`` in the environment (torchrun itself works too)::

    python tests/distributed_job.py OUT --device cpu --tracers native,python

Rank ``r`` runs ``r + 1`` linear layers, an all-reduce in the ``sync`` module, then a relu, on two
samples. Each rank writes ``OUT/<tracer>/rank<r>/`` (its saved result, one per tracer) and
``OUT/rank<r>.json``: what ran without the profiler (the aten ops a dispatch mode sees on CPU, the
kernel names a bare CUPTI capture records on CUDA) and the outputs' sums with and without it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for aitune_dispatch

from aitune_dispatch import ModuleFunctionKernelProfiler  # noqa: E402

WIDTH = 16
REPOSITORY = Path(__file__).resolve().parents[1]
# NVLink multicast stays off on shared multi-GPU hosts (a job using it can take the host's GPUs down)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the job's rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch(out: Path, *, device: str, tracers: str, world_size: int = 2, timeout_s: float = 240.0) -> list[str]:
    """Run the job, one process per rank on this host, all traffic on 127.0.0.1; return each rank's log.

    Raises AssertionError naming the rank and its log's tail when a rank fails or the job outlives
    ``timeout_s`` (every rank is then killed).
    """
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **NO_MULTICAST,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world_size),
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, str(Path(__file__).resolve()), str(out), "--device", device, "--tracers", tracers]
    logs = [out / f"rank{rank}.log" for rank in range(world_size)]
    processes = []
    for rank, log in enumerate(logs):
        with log.open("w") as sink:  # a file, not a pipe: a rank blocked on a full pipe would hang the job
            rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            processes.append(subprocess.Popen(command, env=rank_env, stdout=sink, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout_s
    try:
        for process in processes:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired as error:
        for process in processes:
            process.kill()
            process.wait()
        log = logs[0].read_text()
        raise AssertionError(f"the {world_size}-rank job ran past {timeout_s} s; rank 0's log:\n{log}") from error
    texts = [log.read_text() for log in logs]
    for rank, (process, text) in enumerate(zip(processes, texts)):
        assert process.returncode == 0, f"rank {rank} exited with {process.returncode}:\n{text[-4000:]}"
    return texts


class AllReduce(nn.Module):
    """Sums its input over every rank, in place (the collective inside a profiled module)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x)
        return x


class RankModel(nn.Module):
    """``rank + 1`` linear layers, an all-reduce, a relu: the ranks differ in work, not in collectives."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(rank + 1))
        self.sync = AllReduce()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return F.relu(self.sync(x))


def _samples(device: str) -> list[tuple[tuple[torch.Tensor, ...], dict]]:
    generator = torch.Generator().manual_seed(0)
    return [((torch.randn(rows, WIDTH, generator=generator).to(device),), {}) for rows in (4, 2)]


def _pass(model: nn.Module, samples: list) -> float:
    with torch.no_grad():
        return float(sum(model(*args, **kwargs).sum() for args, kwargs in samples))


def _bare_ops(model: nn.Module, samples: list) -> dict[str, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import bare_ops  # the aten ops a dispatch mode alone sees, under no_grad

    def one_pass() -> None:
        for args, kwargs in samples:
            model(*args, **kwargs)

    return dict(bare_ops(one_pass))


def _bare_kernels(model: nn.Module, samples: list) -> dict[str, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import bare_kernels  # CUPTI alone: no hooks, no modes, no correlation ids

    return dict(bare_kernels(model, samples))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--tracers", default="python", help="comma-separated op tracers, each profiles once")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    device = "cpu"
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        device = f"cuda:{torch.cuda.current_device()}"
    backend = "nccl" if args.device == "cuda" else "gloo"
    kwargs = {"device_id": torch.device(device)} if args.device == "cuda" else {}
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=60), **kwargs)
    try:
        torch.manual_seed(rank)
        model = RankModel(rank).to(device).eval()
        samples = _samples(device)
        facts: dict = {"rank": rank, "output_sum": _pass(model, samples)}  # also the warm-up of every path
        facts["group_references"] = [sys.getrefcount(dist.group.WORLD)]
        for tracer in args.tracers.split(","):
            profiler = ModuleFunctionKernelProfiler(device=args.device, op_tracer=tracer)
            profiler.profile(model, samples, warmup_iterations=1)
            profiler.last_result.save(args.out / tracer / f"rank{rank}")
            del profiler
            facts["group_references"].append(sys.getrefcount(dist.group.WORLD))
        facts["output_sum_after"] = _pass(model, samples)
        # last: PyTorch's Python dispatch mode keeps references to the process group it saw (see below)
        facts["bare"] = _bare_kernels(model, samples) if args.device == "cuda" else _bare_ops(model, samples)
        (args.out / f"rank{rank}.json").write_text(json.dumps(facts))
    finally:
        dist.destroy_process_group()
    return 0


def _exit_without_finalizing(code: int) -> None:
    """End the rank now, skipping the interpreter's teardown, once its files are written.

    The bare op count runs the all-reduce under a Python ``TorchDispatchMode``, and PyTorch then keeps
    the process group referenced: ``destroy_process_group`` cannot join gloo's worker threads. A worker
    still freeing a finished all-reduce (its tensors need the GIL) while the interpreter finalizes is
    unwound inside a destructor and the process aborts ("terminate called without an active
    exception", pytorch/pytorch#190489), in about one job in five on two cores.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_without_finalizing(main())
