"""Provenance: compiled kernels and CUDA graph replays attributed to the calls they came from.

The capture calls it through :class:`ProvenanceCapture` (one per ``profile()``, around the warm-up and
the recorded pass) and the two questions it asks first, :func:`uses_compile` and :func:`stand_ins`.
Inside: :mod:`.inductor` observes Inductor's kernel call sites, :mod:`.graphs` the graph nodes created
during captures, :mod:`.attribution` applies both to the joined activity; ``docs/design.md``,
"torch.compile and CUDA graphs".
"""

from .capture import ProvenanceCapture, stand_ins, uses_compile

__all__ = ["ProvenanceCapture", "stand_ins", "uses_compile"]
