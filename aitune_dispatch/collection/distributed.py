"""Who recorded a pass under torch.distributed: rank, world size, host, backend.

Read once per ``profile()`` after the pass; nothing is installed and no collective is issued (the
values come from the default process group this process already joined). Without an initialised
process group, or in a torch built without distributed support, there is nothing to say.
"""

from __future__ import annotations

import os
import socket

from .. import schema


def rank_metadata() -> dict[str, str]:
    """``result.metadata`` entries naming this process's place in the default process group.

    Returns
    -------
    dict[str, str]
        ``rank``, ``world_size``, ``host`` (``socket.gethostname()``), ``distributed_backend`` and,
        where the ``LOCAL_RANK`` environment variable is set (torchrun), ``local_rank``
        (keys in :mod:`aitune_dispatch.schema`); empty when no process group is initialised.
    """
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
