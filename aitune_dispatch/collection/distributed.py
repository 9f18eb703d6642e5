"""Who recorded a pass under torch.distributed (rank, world size, host, backend), read from the default
process group after the pass: nothing installed, no collective issued."""

from __future__ import annotations

import os
import socket

from .. import schema


def rank_metadata() -> dict[str, str]:
    """``result.metadata`` entries for this process's rank (``local_rank`` where ``LOCAL_RANK`` is set);
    empty without a process group."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed support
        return {}
    if not (dist.is_available() and dist.is_initialized()):
        return {}
    facts = {
        schema.RANK_KEY: str(dist.get_rank()),
        schema.WORLD_SIZE_KEY: str(dist.get_world_size()),
        schema.HOST_KEY: socket.gethostname(),
        schema.DISTRIBUTED_BACKEND_KEY: str(dist.get_backend()),
    }
    local_rank = os.environ.get("LOCAL_RANK", "")
    if local_rank.isdigit():
        facts[schema.LOCAL_RANK_KEY] = local_rank
    return facts
