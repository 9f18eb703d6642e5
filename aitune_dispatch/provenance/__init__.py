"""Provenance: compiled kernels and CUDA graph replays attributed to the calls they came from.

The capture uses :class:`ProvenanceCapture`, :func:`uses_compile` and :func:`stand_ins`; :mod:`.inductor`
observes kernel call sites, :mod:`.graphs` captured graph nodes, :mod:`.attribution` applies both
(``docs/design.md``, "torch.compile and CUDA graphs").
"""

from .capture import ProvenanceCapture, stand_ins, uses_compile
from .compile_backends import compile_backends

__all__ = ["ProvenanceCapture", "compile_backends", "stand_ins", "uses_compile"]
