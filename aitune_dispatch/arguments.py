"""What the profiler and ``profile()`` are given, checked by the facade before anything runs.

Each refusal has the reference's wording where it has one, then says what to pass;
:func:`.capture.record` takes the results as given.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from torch import nn

from .backends import resolve_tracer
from .config import ProfileConfig
from .schema import Sample
from .tracing import functional_names


def resolved_config(**options: Any) -> ProfileConfig:
    """``ProfileConfig(**options)`` with the tracing backend that will run."""
    return _with_tracer(ProfileConfig(**options))


def _with_tracer(config: ProfileConfig) -> ProfileConfig:
    return replace(config, op_tracer=resolve_tracer(config.op_tracer))


class ConfigOption:
    """A profiler attribute read from and assigned through its ``config``, the one state every run reads."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, profiler: Any, owner: type | None = None) -> Any:
        return self if profiler is None else getattr(profiler.config, self.name)

    def __set__(self, profiler: Any, value: Any) -> None:
        profiler.config = _with_tracer(replace(profiler.config, **{self.name: value}))  # validated again


def config_options(count: int) -> tuple[ConfigOption, ...]:
    """``count`` fresh :class:`ConfigOption` descriptors, one per option the class names."""
    return tuple(ConfigOption() for _ in range(count))


class SampleError(ValueError):
    """A ``data`` item is not an ``(args, kwargs)`` pair; the message names the item."""


def normalize_samples(data: Iterable[Any] | None) -> list[Sample] | None:
    """``data`` as a list of ``(args tuple, kwargs dict)`` copies, None kept; :class:`SampleError` names a bad item."""
    if data is None:
        return None
    if _is_pair(data):
        raise SampleError(
            "data must be a list of (args, kwargs) pairs; got one pair: pass [data], e.g. [((x,), {})]"
        )
    if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Iterable) or hasattr(data, "dtype"):
        raise SampleError(
            f"data must be a list of (args, kwargs) pairs such as [((x,), {{}})]; got {type(data).__name__}"
        )
    samples = []
    for index, item in enumerate(data):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise SampleError(
                f"data[{index}] must be an (args, kwargs) pair such as ((x,), {{}}); got {type(item).__name__}"
            )
        args, kwargs = item
        if not isinstance(args, (tuple, list)) or not isinstance(kwargs, Mapping):
            raise SampleError(
                f"data[{index}] must be (args tuple, kwargs dict); got ({type(args).__name__}, {type(kwargs).__name__})"
            )
        samples.append((tuple(args), dict(kwargs)))
    return samples


def _is_pair(value: Any) -> bool:
    """``((x,), {})`` itself rather than a list of such pairs."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], (tuple, list))
        and isinstance(value[1], Mapping)
    )


def resolve_root(function: Callable[..., Any], module: nn.Module | None) -> nn.Module:
    """The root of the profiled hierarchy: ``module``, else ``function`` (a compiled model: the model it wraps)."""
    if not callable(function):
        raise TypeError(f"function must be callable; got {type(function).__name__}")
    if module is None:
        if isinstance(function, nn.Module):
            original = getattr(function, "_orig_mod", None)
            return original if isinstance(original, nn.Module) else function
        raise ValueError(
            "module must be provided when function is not an nn.Module. Pass module=<the nn.Module "
            "to observe>, e.g. profile(inference_fn, module=pipe.transformer)"
        )
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module; got {type(module).__name__}")
    return module


def check_data(data: Iterable[Any] | None, warmup_iterations: Any) -> list[Sample] | None:
    """``profile()``'s ``data`` as samples, after checking ``warmup_iterations``; warns when ``data`` is empty."""
    if isinstance(warmup_iterations, bool) or not isinstance(warmup_iterations, int) or warmup_iterations < 0:
        raise ValueError(
            "warmup_iterations must be greater than or equal to 0. Pass an int >= 0 (0 skips the "
            f"warmup); got {warmup_iterations!r}"
        )
    samples = normalize_samples(data)
    if samples == []:
        warnings.warn(
            "data is empty: the function is never called, so the result is empty; pass samples such as "
            "[((x,), {})], or data=None to call the function once without arguments",
            RuntimeWarning,
            stacklevel=3,
        )
    return samples


def warn_unknown_names(function_names: frozenset[str] | None) -> bool:
    """Warn about names that are not intercepted functionals (``torch.*`` names are fine).

    Returns whether there was anything to check (the profiler warns once).
    """
    if function_names is None:
        return False
    unknown = sorted(n for n in function_names - functional_names() if not n.startswith("torch."))
    if unknown:
        warnings.warn(
            "function_names has names that are not torch.nn.functional functions this profiler "
            f"intercepts, so no samples will be collected for them: {unknown}",
            stacklevel=3,
        )
    return True


def check_on_progress(on_progress: Any) -> None:
    """Refuse an ``on_progress`` that is neither None nor callable."""
    if on_progress is not None and not callable(on_progress):
        raise TypeError(
            f"on_progress must be a callable that takes a capture.Step, or None; got {type(on_progress).__name__}"
        )
