"""Inductor provenance: which FX nodes, modules, functional calls and ops each compiled kernel comes from.

:class:`InductorProvenance` observes Inductor's per-call-site provenance hook while ``profile()``
runs and turns each call into a :class:`Site` with its :class:`Source` s as plain strings;
graphs are remembered for later runs, and resolved against the profiled :class:`Hierarchy`
(``docs/design.md``, "torch.compile and CUDA graphs" and "Compiled and graph attribution").
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from types import CodeType, ModuleType, TracebackType
from typing import Any

import pyarrow as pa
from torch import nn

from .. import schema, torch_compat
from ..tracing.functional import api_name, functional_registry
from ..tracing.import_watch import AfterImport, ImportWatch

HOOK = torch_compat.PROVENANCE_HOOK
_INDUCTOR = "torch._inductor"
_DEBUG = "torch._inductor.debug"
# the caches that would load a compiled graph instead of generating it (and so hide its call sites)
_CACHE_CONFIGS = {
    "torch._inductor.config": ("fx_graph_cache", "fx_graph_remote_cache"),
    "torch._functorch.config": ("enable_autograd_cache",),
}
MEMO_PROGRAMS = 64  # compiled graphs remembered across profile() calls (the most recently seen)

# graph positions: how a site's sources are ordered (the latest computes the kernel's result)
_NO_POSITION = -1


@dataclass(frozen=True)
class Source:
    """One FX source of a compiled kernel: a call of the compiled model.

    Attributes
    ----------
    order:
        Post-grad graph position of the source's last node.
    module_key, module_path, module_type:
        The innermost module's ``nn_module_stack`` key (``str(id(module))``, maybe ``@N``), path from
        the compiled frame (``blocks.0.fc1``) and class name; all ``""`` at the frame's own level.
    function_name:
        The functional name (``linear`` for an ``nn.Linear`` call), else None.
    op:
        The aten op the nodes were decomposed from (``aten::gelu``), else None.
    source:
        The call, unique in its graph: a built-in module's path (``blocks.0.fc1@1`` for a second
        call), else Dynamo's name for it (``relu_1``).
    """

    order: int
    module_key: str
    module_path: str
    module_type: str
    function_name: str | None
    op: str | None
    source: str


@dataclass(frozen=True)
class Site:
    """One kernel call site of a compiled graph; ``key``: the kernel name, or an extern call's aten op."""

    position: int
    extern: bool
    key: str
    kernel_name: str
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class Program:
    """The kernel call sites of one compiled graph, in the order its compiled code runs them.

    Remembered programs also keep ``bound`` (weak references to the modules their sources named, by
    ``id``: an ``id`` alone can be reused once a module is freed), ``code`` (Dynamo's compiled code for
    ``label`` in ``frame``'s cache) and ``tree`` (``(path, type)`` of every module below the frame's,
    root first), by which another instance is matched (:meth:`Hierarchy.frame_root`).
    """

    label: str
    sites: tuple[Site, ...]
    bound: dict[int, weakref.ref[nn.Module]] = field(default_factory=dict, compare=False, hash=False, repr=False)
    frame: weakref.ref[CodeType] | None = field(default=None, compare=False, hash=False, repr=False)
    code: weakref.ref[CodeType] | None = field(default=None, compare=False, hash=False, repr=False)
    tree: tuple[tuple[str, str], ...] = field(default=(), compare=False, hash=False, repr=False)

    def signature(self) -> tuple[Any, ...]:
        """What makes two programs the same (a recompile of the same graph generates the same sites)."""
        return tuple((s.key, s.extern, tuple((x.module_key, x.function_name, x.op, x.source) for x in s.sources))
                     for s in self.sites)


# -- FX node metadata -> Source ---------------------------------------------------------------------
_FRAME_LOCAL = re.compile(r"""^(?:L|G)\[(['"])[^'"]+\1\]""")
_SELF_LOCAL = re.compile(r"^self(?=$|[.\[])")  # a path written from the frame's ``self``
_CONTAINER_ITEM = re.compile(r"""\._(?:modules|parameters|buffers)\[(['"])([^'"\]]+)\1\]""")
_QUOTED_ITEM = re.compile(r"""\[(['"])([^'"\]]+)\1\]""")
_INDEX_ITEM = re.compile(r"\[(\d+)\]")


def module_path(source_name: str) -> str:
    """``blocks.0.fc1`` for Dynamo's ``L['self'].blocks[0]._modules['fc1']``: the path below the frame's local."""
    path = _FRAME_LOCAL.sub("", source_name, count=1)
    path = _SELF_LOCAL.sub("", path, count=1)
    path = _CONTAINER_ITEM.sub(r".\2", path)
    path = _QUOTED_ITEM.sub(r".\2", path)
    path = _INDEX_ITEM.sub(r".\1", path)
    return path.strip(".")


def module_type_name(module_class: Any) -> str:
    """``Linear`` for ``nn.Linear`` and for the ``"torch.nn.modules.linear.Linear"`` some torch versions store."""
    name = module_class if isinstance(module_class, str) else getattr(module_class, "__qualname__", "")
    return str(name).rpartition(".")[2]


def op_name(op: Any) -> str | None:
    """``aten::gelu`` for ``aten.gelu.default``; None for something that is not an operator."""
    schema_ = getattr(op, "_schema", None)
    if schema_ is not None:
        return str(schema_.name)
    name = getattr(op, "name", None)
    return str(name() if callable(name) else name) if name else None


_EXTERN_CALL = re.compile(r"^extern_kernels\.(?P<op>\w+)$")
_OPS_CALL = re.compile(r"^(?:torch\.ops\.)?(?P<ns>\w+)\.(?P<op>\w+)(?:\.\w+)?$")


def extern_op(kernel_name: str) -> str | None:
    """The aten op an extern kernel call dispatches: ``aten::mm`` for ``extern_kernels.mm``; None for no operator."""
    found = _EXTERN_CALL.match(kernel_name)
    if found:
        return f"aten::{found['op']}"
    found = _OPS_CALL.match(kernel_name)
    if found and found["ns"] in ("aten", "prims", "quantized", "_c10d_functional", "c10d"):
        return f"{found['ns']}::{found['op']}"
    return None


# built-in module classes whose functional is not their name in snake case
_MODULE_FUNCTIONALS = {
    "MultiheadAttention": "multi_head_attention_forward",
    "BatchNorm1d": "batch_norm",
    "BatchNorm2d": "batch_norm",
    "BatchNorm3d": "batch_norm",
    "SyncBatchNorm": "batch_norm",
    "InstanceNorm1d": "instance_norm",
    "InstanceNorm2d": "instance_norm",
    "InstanceNorm3d": "instance_norm",
    "Upsample": "interpolate",
    "UpsamplingNearest2d": "interpolate",
    "UpsamplingBilinear2d": "interpolate",
    "CrossEntropyLoss": "cross_entropy",
    "BCELoss": "binary_cross_entropy",
    "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
    "NLLLoss": "nll_loss",
}


def module_functional(module_class: type) -> str | None:
    """The functional a built-in module class (its MRO's first ``torch.nn`` class) calls: ``linear`` for ``Linear``."""
    names = {name.replace("_", ""): name for name in functional_registry().values()}
    for klass in getattr(module_class, "__mro__", ()):
        if klass is nn.Module:
            break
        if not str(getattr(klass, "__module__", "")).startswith("torch.nn."):
            continue
        if klass.__name__ in _MODULE_FUNCTIONALS:
            return _MODULE_FUNCTIONALS[klass.__name__]
        plain = klass.__name__.lower()
        for candidate in (plain, plain.removesuffix("loss")):
            if candidate in names:
                return names[candidate]
    return None


def functional_of(target: Any, all_functions: bool = False) -> str | None:
    """The functional name a ``source_fn_stack`` target stands for (``F.relu``, ``nn.GELU``), else None.

    With ``all_functions`` (the profiler's ``functions="all"``) other torch-level calls get their
    API name (``torch.softmax``), as eager profiling attributes them.
    """
    if isinstance(target, type):
        return module_functional(target) if issubclass(target, nn.Module) else None
    try:
        name = functional_registry().get(target)
    except TypeError:  # unhashable
        return None
    if name is None and all_functions:
        resolved = api_name(target) if callable(target) else None
        return resolved if resolved and resolved.startswith("torch.") else None
    return name


def source_of(node: Any, position: int, all_functions: bool = False) -> Source:
    """The :class:`Source` of one FX node, from its ``nn_module_stack``, ``source_fn_stack`` and ``original_aten``."""
    meta = getattr(node, "meta", None) or {}
    stack = meta.get("nn_module_stack") or {}
    key, path, kind = "", "", ""
    if stack:
        key, (source_name, module_class) = list(stack.items())[-1]
        key, path, kind = str(key), module_path(str(source_name)), module_type_name(module_class)
    entries = list(meta.get("source_fn_stack") or ())
    function, call = None, None
    for name, target in reversed(entries):
        function = functional_of(target, all_functions)
        if function is not None:
            call = _module_call(key, path) if isinstance(target, type) and path else str(name)
            break
    if call is None:  # not a functional: the call Dynamo recorded (its decomposed nodes share it)
        call = str(entries[-1][0]) if entries else str(getattr(node, "name", ""))
    op = op_name(meta.get("original_aten")) or op_name(getattr(node, "target", None))
    return Source(position, key, path, kind, function, op, call)


def _module_call(key: str, path: str) -> str:
    """``blocks.0.fc1`` for a built-in module's call; ``blocks.0.fc1@1`` for its second call in the graph."""
    _, at, count = key.partition("@")
    return f"{path}@{count}" if at else path


def merge_sources(sources: Iterable[Source]) -> tuple[Source, ...]:
    """One :class:`Source` per call (module, function and name), ordered by its latest node; latest first."""
    merged: dict[tuple[str, str | None, str], Source] = {}
    for source in sources:
        identity = (source.module_key, source.function_name, source.source)
        known = merged.get(identity)
        if known is None or source.order > known.order:
            merged[identity] = source
    return tuple(sorted(merged.values(), key=lambda s: -s.order))


def _origins(node_schedule: Any, is_extern: bool) -> list[Any]:
    """The FX nodes of one kernel call site, as Inductor hands them to its provenance hook."""
    if is_extern:
        origin = getattr(node_schedule, "origin_node", None)  # exact where known; ``origins`` also has inputs
        return [origin] if origin is not None else list(getattr(node_schedule, "origins", ()) or ())
    nodes: list[Any] = []
    for item in node_schedule or ():
        ir_node = getattr(item, "node", None)
        parts = [ir_node] if ir_node is not None else [getattr(n, "node", None) for n in _get_nodes(item)]
        for part in parts:
            nodes.extend(getattr(part, "origins", ()) or ())
    return nodes


def _get_nodes(item: Any) -> list[Any]:
    get_nodes = getattr(item, "get_nodes", None)
    try:
        return list(get_nodes()) if callable(get_nodes) else []
    except Exception:  # noqa: BLE001 - a marker or an unfamiliar scheduler node: no nodes
        return []


def site_from_nodes(
    position: int,
    kernel_name: str,
    nodes: Sequence[Any],
    is_extern: bool = False,
    all_functions: bool = False,
    positions: dict[str, int] | None = None,
) -> Site:
    """The :class:`Site` at ``position`` of a kernel call generated from FX ``nodes`` (``positions``: by name)."""
    if positions is None:
        positions = _positions(nodes)
    sources = merge_sources(
        source_of(node, positions.get(getattr(node, "name", None), _NO_POSITION), all_functions) for node in nodes
    )
    op = extern_op(kernel_name) if is_extern else None
    return Site(position, op is not None, op or kernel_name, kernel_name, sources)


def _graphs_of(nodes: Sequence[Any]) -> list[Any]:
    return list({id(g): g for g in (getattr(n, "graph", None) for n in nodes) if g is not None}.values())


def _graph_positions(graph: Any) -> dict[str, int]:
    """Position of every node of an FX graph, by node name (unique within a graph)."""
    return {node.name: index for index, node in enumerate(getattr(graph, "nodes", ()))}


def _positions(nodes: Sequence[Any]) -> dict[str, int]:
    """Graph position of every node of the graphs ``nodes`` belong to, by node name."""
    positions: dict[str, int] = {}
    for graph in _graphs_of(nodes):
        positions.update(_graph_positions(graph))
    return positions


# -- the hook --------------------------------------------------------------------------------------
@dataclass
class _Building:
    """The sites of one graph being generated; a second code generation of the graph starts over."""

    graph: weakref.ref[Any]
    codegen: weakref.ref[Any] | None
    label: str
    frame: weakref.ref[CodeType] | None = None
    sites: list[Site] = field(default_factory=list)


_memo: OrderedDict[tuple[Any, ...], Program] = OrderedDict()
_memo_lock = threading.Lock()
_active: list[InductorProvenance] = []


def remembered_programs() -> list[Program]:
    """Programs captured by earlier ``profile()`` calls in this process, oldest first."""
    with _memo_lock:
        return list(_memo.values())


def remember(programs: Iterable[Program], modules: Sequence[nn.Module], names: Sequence[str] = ()) -> None:
    """Keep ``programs`` for later ``profile()`` calls (the :data:`MEMO_PROGRAMS` most recent), bound to ``modules``.

    With ``names`` each also keeps its frame's module tree and compiled code, to match another instance.
    """
    hierarchy = Hierarchy.of(modules, names) if len(names) == len(modules) and names else None
    objects = {id(m): m for m in modules}
    with _memo_lock:
        for program in programs:
            ids = {_object_id(s.module_key) for site in program.sites for s in site.sources}
            bound = {i: weakref.ref(objects[i]) for i in ids if i in objects}
            tree = hierarchy.frame_tree(program) if hierarchy is not None else ()
            code = _compiled_code(program.frame, program.label) if tree else None
            key = program.signature()
            _memo.pop(key, None)
            _memo[key] = replace(program, bound=bound, code=code, tree=tree if code is not None else ())
        while len(_memo) > MEMO_PROGRAMS:
            _memo.popitem(last=False)


def _frame_code() -> weakref.ref[CodeType] | None:
    """The code object of the frame Dynamo is compiling on this thread, None outside Dynamo."""
    code = torch_compat.dynamo_frame_code()
    return weakref.ref(code) if code is not None else None


def _cache_entries(frame: weakref.ref[CodeType] | None) -> list[Any]:
    """Dynamo's cache entries of a frame's code (each holds a compiled code object and its compile id)."""
    code = frame() if frame is not None else None
    return [] if code is None else torch_compat.dynamo_cache_entries(code)


def _compiled_code(frame: weakref.ref[CodeType] | None, label: str) -> weakref.ref[CodeType] | None:
    """Dynamo's compiled code for compile id ``label`` in ``frame``'s cache, None where it holds none."""
    for entry in _cache_entries(frame):
        if str(getattr(entry, "compile_id", "")) == label:
            return _weak(getattr(entry, "code", None))
    return None


def still_compiled(program: Program) -> bool:
    """Whether Dynamo still holds ``program``'s compiled code (not reset, evicted or recompiled away)."""
    code = program.code() if program.code is not None else None
    return code is not None and any(getattr(entry, "code", None) is code for entry in _cache_entries(program.frame))


def forget_programs() -> None:
    """Drop every remembered program (tests; or to free the strings after profiling is done)."""
    with _memo_lock:
        _memo.clear()


class InductorProvenance:
    """Observes Inductor's kernel call sites while it is entered; single-use, not reentrant.

    ``bypass_caches`` turns Inductor's and AOTAutograd's caches off meanwhile, so graphs are generated (and seen).
    """

    def __init__(self, all_functions: bool = False, bypass_caches: bool = True) -> None:
        self._all = all_functions
        self._bypass = bypass_caches
        self._building: dict[int, _Building] = {}
        self._positions: dict[int, tuple[weakref.ref[Any] | None, dict[str, int]]] = {}  # by id of an FX graph
        self._done: list[Program] = []
        self._original: Any = None
        self._hook: Any = None
        self._patched: list[tuple[Any, str]] = []
        self._configs = contextlib.ExitStack()
        self._watch: ImportWatch | None = None
        self._entered = False
        self.unavailable: str | None = None  # why compiled kernels cannot be attributed, in words
        self.failures = 0  # kernel call sites whose metadata could not be read

    # -- context ------------------------------------------------------------------------------------
    def __enter__(self) -> InductorProvenance:
        if self._entered:
            raise RuntimeError("an InductorProvenance observes one profile(); create a new one")
        self._entered = True
        if _active:
            raise RuntimeError("another InductorProvenance is active; profile one thing at a time")
        _active.append(self)
        watched: dict[str, AfterImport] = {_DEBUG: self._attach}
        if self._bypass:
            watched.update({name: self._bypass_caches for name in _CACHE_CONFIGS})
        self._watch = ImportWatch(watched)
        try:
            self._watch.__enter__()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._watch is not None:
                self._watch.__exit__(exc_type, exc, tb)
        finally:
            try:
                self._restore()
            finally:
                self._configs.close()
                if self in _active:
                    _active.remove(self)

    def _attach(self, debug: ModuleType) -> None:
        """``torch._inductor.debug`` is loaded: observe its hook there and wherever Inductor imported it by name."""
        try:
            self._attach_hook(debug)
        except Exception as error:  # noqa: BLE001 - compiled kernels then stay on the compiled module, as said
            self._restore()
            self.unavailable = f"Inductor's {HOOK} could not be observed ({type(error).__name__}: {error})"

    def _attach_hook(self, debug: ModuleType) -> None:
        original = getattr(debug, HOOK, None)
        if not callable(original):
            self.unavailable = f"this torch's Inductor has no {HOOK} to observe"
            return
        self._original, self._hook = original, self._make_hook(original)
        self._patch(debug)
        for module in _inductor_modules():
            if module is not debug and getattr(module, HOOK, None) is original:
                self._patch(module)

    def _patch(self, module: Any) -> None:
        setattr(module, HOOK, self._hook)
        self._patched.append((module, HOOK))

    def _restore(self) -> None:
        """Put the original back everywhere it was patched, and where modules imported the hook meanwhile."""
        if self._hook is None:
            return
        for module, name in self._patched:
            setattr(module, name, self._original)
        self._patched.clear()
        for module in _inductor_modules():
            if getattr(module, HOOK, None) is self._hook:
                setattr(module, HOOK, self._original)

    def _bypass_caches(self, config: ModuleType) -> None:
        """Inductor's FX graph caches or AOTAutograd's cache off while entered (``_CACHE_CONFIGS``)."""
        for name in _CACHE_CONFIGS[config.__name__]:
            if hasattr(config, name):
                self._configs.enter_context(config.patch(**{name: False}))  # type: ignore[attr-defined]

    def _make_hook(self, original: Any) -> Any:
        def observed(*args: Any, **kwargs: Any) -> Any:
            if _active and _active[0] is self:
                self._observe(args, kwargs)
            return original(*args, **kwargs)

        observed.__wrapped__ = original  # type: ignore[attr-defined]
        observed.__doc__ = original.__doc__
        return observed

    # -- observation --------------------------------------------------------------------------------
    def _observe(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            node_schedule = kwargs.get("node_schedule", args[0] if args else None)
            kernel_name = kwargs.get("kernel_name", args[1] if len(args) > 1 else None)
            is_extern = bool(kwargs.get("is_extern", args[2] if len(args) > 2 else False))
            if not kernel_name:
                return
            building = self._current_graph()
            nodes = _origins(node_schedule, is_extern)
            positions = self._graph_positions(nodes)
            site = site_from_nodes(len(building.sites), str(kernel_name), nodes, is_extern, self._all, positions)
            building.sites.append(site)
        except Exception:  # noqa: BLE001 - never interfere with compilation: count it instead
            self.failures += 1

    def _graph_positions(self, nodes: Sequence[Any]) -> dict[str, int]:
        """Node positions of the graphs ``nodes`` belong to, computed once per graph (a graph has many sites)."""
        positions: dict[str, int] = {}
        for graph in _graphs_of(nodes):
            known = self._positions.get(id(graph))
            if known is None or (known[0] is not None and known[0]() is not graph):
                known = self._positions[id(graph)] = (_weak(graph), _graph_positions(graph))
            positions.update(known[1])
        return positions

    def _current_graph(self) -> _Building:
        from torch._inductor.virtualized import V

        graph = V.graph
        codegen = getattr(graph, "wrapper_code", None)
        known = self._building.get(id(graph))
        if known is not None and known.graph() is not graph:  # another graph at a freed one's address
            self._finish(id(graph))
            known = None
        if known is None:
            known = self._building[id(graph)] = _Building(
                weakref.ref(graph), _weak(codegen), _graph_label(graph), _frame_code()
            )
        elif known.codegen is not None and known.codegen() is not codegen:  # generated again: keep the last
            known.sites.clear()
            known.codegen = _weak(codegen)
        return known

    def _finish(self, key: int) -> None:
        building = self._building.pop(key)
        if building.sites:
            self._done.append(Program(building.label, tuple(building.sites), frame=building.frame))

    def programs(self) -> list[Program]:
        """The compiled graphs seen so far, in the order their generation began."""
        building = [Program(b.label, tuple(b.sites), frame=b.frame) for b in self._building.values() if b.sites]
        return [*self._done, *building]


def _weak(value: Any) -> weakref.ref[Any] | None:
    try:
        return weakref.ref(value)
    except TypeError:
        return None


def _graph_label(graph: Any) -> str:
    """Dynamo's compile id (``0/1``: frame 0, second compile) where known, else the graph's name."""
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - only a label
        compile_id = None
    return str(compile_id) if compile_id is not None else str(getattr(graph, "name", "graph"))


def _inductor_modules() -> list[Any]:
    return [m for name, m in list(sys.modules.items()) if m is not None and name.startswith(_INDUCTOR)]


# -- resolution against the profiled hierarchy -------------------------------------------------------
STRONG, WEAK = 1, 2  # a module found by object identity, or by path and type
# SITES.priority: compiled during this profile(); remembered, for these module objects; remembered, for
# another instance of the same modules (matched by path and type below a module of the same tree)
CURRENT, REMEMBERED, ANOTHER_INSTANCE = 0, 1, 2


def _object_id(module_key: str) -> int:
    """The module ``id`` in an ``nn_module_stack`` key (``"140023...@1"``); -1 for a key that holds none."""
    head = module_key.split("@", 1)[0]
    return int(head) if head.isdigit() else -1


@dataclass(frozen=True)
class Hierarchy:
    """The profiled modules by id: what a :class:`Source` 's module is resolved against."""

    names: tuple[str, ...]
    types: tuple[str, ...]
    by_object: dict[int, int]
    objects: tuple[nn.Module, ...] = ()
    by_name: dict[str, int] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, modules: Sequence[nn.Module], names: Sequence[str]) -> Hierarchy:
        """The hierarchy of ``ModuleTracker.modules`` / ``.names`` (module id = position)."""
        return cls(
            tuple(names),
            tuple(module_type_name(type(m)) for m in modules),
            {id(m): i for i, m in enumerate(modules)},
            tuple(modules),
            {name: i for i, name in enumerate(names)},
        )

    def resolve(self, source: Source, bound: dict[int, weakref.ref[nn.Module]] | None = None) -> tuple[int, int]:
        """``(module_id, strength)`` of a source's module; ``(NO_MODULE, 0)`` where not found.

        By identity (same type; for a remembered program, the ``bound`` object), else by path from
        the root, else by the one module of that type whose name ends with the path.
        """
        if not source.module_type:
            return schema.NO_MODULE, 0
        object_id = _object_id(source.module_key)
        found = self.by_object.get(object_id)
        if found is not None and self.types[found] == source.module_type:
            if bound is None:
                return found, STRONG
            ref = bound.get(object_id)
            if ref is not None and self.objects and ref() is self.objects[found]:
                return found, STRONG
        path = source.module_path
        matches = [
            i
            for i, name in enumerate(self.names)
            if self.types[i] == source.module_type and path and (name == path or name.endswith("." + path))
        ]
        exact = [i for i in matches if self.names[i] == path]
        if exact:
            return exact[0], WEAK
        if len(matches) == 1:
            return matches[0], WEAK
        return schema.NO_MODULE, 0

    def subtree(self, module_id: int, limit: int | None = None) -> tuple[tuple[str, str], ...]:
        """``(path below it, type)`` of a module and those below it, itself first; ``limit``: at most that plus one."""
        prefix = self.names[module_id]
        below = prefix + "." if prefix else ""
        tree = [("", self.types[module_id])]
        for index in range(module_id + 1, len(self.names)):  # named_modules() lists a subtree contiguously
            name = self.names[index]
            if not name.startswith(below) or (limit is not None and len(tree) > limit):
                break
            tree.append((name[len(below):], self.types[index]))
        return tuple(tree)

    def compiled_for(self, program: Program, bound: dict[int, weakref.ref[nn.Module]] | None = None) -> int | None:
        """The module ``program``'s frame compiled, from its sources' identities and paths; None where unknown.

        A source of ``tail._orig_mod.1`` with path ``1`` puts it at ``tail._orig_mod``; sources that
        disagree (a frame with several module locals) give None.
        """
        roots = set()
        for site in program.sites:
            for source in site.sources:
                object_id = _object_id(source.module_key)
                found = self.by_object.get(object_id)
                if not source.module_type or not source.module_path or found is None:
                    continue
                ref = bound.get(object_id) if bound is not None else None
                if bound is not None and (ref is None or ref() is not self.objects[found]):
                    continue  # an id reused by another object since
                name, path = self.names[found], source.module_path
                if self.types[found] != source.module_type or not (name == path or name.endswith("." + path)):
                    return None
                roots.add(name[: len(name) - len(path)].rstrip("."))
        return self.by_name.get(roots.pop()) if len(roots) == 1 else None

    def frame_tree(self, program: Program) -> tuple[tuple[str, str], ...]:
        """The :meth:`subtree` of the module ``program``'s frame compiled (:meth:`compiled_for`); ``()``: unknown."""
        root = self.compiled_for(program)
        return self.subtree(root) if root is not None else ()

    def same_tree(self, module_id: int) -> list[int]:
        """The other modules whose :meth:`subtree` is ``module_id``'s: where a graph compiled for it may run too."""
        tree = self.subtree(module_id)
        return [
            i
            for i, kind in enumerate(self.types)
            if i != module_id and kind == tree[0][1] and self.subtree(i, len(tree)) == tree
        ]

    def frame_root(self, program: Program) -> int | None:
        """The one module whose :meth:`subtree` is ``program``'s tree, while Dynamo still holds its code; else None.

        That module runs the graph although it was compiled for another instance; with two such
        modules none is guessed.
        """
        tree = program.tree
        if not tree:
            return None
        candidates = [
            i for i, kind in enumerate(self.types) if kind == tree[0][1] and self.subtree(i, len(tree)) == tree
        ]
        return candidates[0] if len(candidates) == 1 and still_compiled(program) else None

    def resolve_below(self, root: int, source: Source) -> int:
        """The module at ``source``'s path below ``root`` (:meth:`frame_root`), of its type; NO_MODULE otherwise."""
        if not source.module_type or not source.module_path:
            return schema.NO_MODULE
        prefix = self.names[root]
        found = self.by_name.get(f"{prefix}.{source.module_path}" if prefix else source.module_path)
        return found if found is not None and self.types[found] == source.module_type else schema.NO_MODULE


def site_tables(
    current: Sequence[Program], earlier: Sequence[Program], hierarchy: Hierarchy
) -> tuple[pa.Table, pa.Table]:
    """``SITES`` and ``SITE_SOURCES`` of ``current`` and ``earlier`` programs resolved against ``hierarchy``.

    A remembered program is kept where one of its modules is one of the hierarchy's objects
    (:data:`REMEMBERED`), or where it runs for another instance (:data:`ANOTHER_INSTANCE`); names
    alone could be another model's, so others are skipped.
    """
    sites: dict[str, list[Any]] = {name: [] for name in schema.SITES.names}
    sources: dict[str, list[Any]] = {name: [] for name in schema.SITE_SOURCES.names}
    seen = {p.signature() for p in current}
    ranked: list[tuple[Program, int, list[list[tuple[Source, int]]]]] = []
    for program in current:
        ranked.append(
            (program, CURRENT, [[(s, hierarchy.resolve(s)[0]) for s in site.sources] for site in program.sites])
        )
    instances: set[tuple[Any, ...]] = set()  # what another instance's programs resolved to, once each
    for program in earlier:
        if program.signature() in seen:
            continue
        resolved = [[(s, *hierarchy.resolve(s, program.bound)) for s in site.sources] for site in program.sites]
        if any(strength == STRONG for site in resolved for _, _, strength in site):
            ranked.append((program, REMEMBERED, [[(s, m) for s, m, _ in site] for site in resolved]))
            continue
        root = hierarchy.frame_root(program)
        if root is None:
            continue  # none of its modules is one of this hierarchy's objects: another model's graph
        below = [[(s, hierarchy.resolve_below(root, s)) for s in site.sources] for site in program.sites]
        identity = tuple(
            (site.key, site.extern, tuple((m, s.function_name, s.op, s.source) for s, m in resolved_site))
            for site, resolved_site in zip(program.sites, below)
        )
        if identity not in instances:  # the same graph compiled again for yet another instance: once
            instances.add(identity)
            ranked.append((program, ANOTHER_INSTANCE, below))
    site_id = 0
    for program_id, (program, priority, resolved) in enumerate(ranked):
        for site, site_sources in zip(program.sites, resolved):
            for column, value in zip(
                schema.SITES.names, (site_id, program_id, site.position, site.extern, site.key, priority)
            ):
                sites[column].append(value)
            for source, module_id in site_sources:
                row = (site_id, source.order, module_id, source.function_name, source.op, source.source)
                for column, value in zip(schema.SITE_SOURCES.names, row):
                    sources[column].append(value)
            site_id += 1
    return pa.table(sites, schema=schema.SITES), pa.table(sources, schema=schema.SITE_SOURCES)
