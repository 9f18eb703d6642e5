"""Compiled-kernel provenance and graph replays, without a GPU: FX graphs built here, synthetic tables.

``provenance/inductor.py`` turns the FX nodes Inductor generated a kernel from into sources (module,
functional call, op); ``provenance/attribution.py`` matches launches to kernel call sites, applies the rule for
kernels fused from several calls, and attributes replayed CUDA graph nodes to their capture.
"""

from __future__ import annotations

import operator

import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

from aitune_dispatch import schema
from aitune_dispatch.provenance.attribution import attribute, captured_nodes, ranked_sources
from aitune_dispatch.provenance.inductor import (
    Hierarchy,
    Program,
    extern_op,
    forget_programs,
    module_functional,
    module_path,
    remember,
    remembered_programs,
    site_from_nodes,
    site_tables,
)

pytestmark = pytest.mark.single_backend  # no tracing backend involved

aten = torch.ops.aten


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.GELU()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])


def _node(graph: fx.Graph, target, meta: dict, *args) -> fx.Node:  # noqa: ANN001
    node = graph.call_function(target, args)
    node.meta.update(meta)
    return node


def _block_graph(net: Net) -> tuple[fx.Graph, list[fx.Node]]:
    """The post-grad nodes of ``gelu(blocks[0].fc1(x)) * 2`` with Dynamo's metadata, as Inductor sees them."""
    block, fc1, act = net.blocks[0], net.blocks[0].fc1, net.blocks[0].act
    in_fc1 = {str(id(fc1)): ("L['self'].blocks[0]._modules['fc1']", nn.Linear)}
    in_act = {str(id(act)): ("L['self'].blocks[0].act", nn.GELU)}
    in_block = {str(id(block)): ("L['self'].blocks[0]", Block)}
    graph = fx.Graph()
    x = graph.placeholder("x")
    mm = _node(graph, aten.mm.default, {"nn_module_stack": in_fc1, "source_fn_stack": [("linear", nn.Linear)],
                                         "original_aten": aten.addmm.default}, x, x)
    bias = _node(graph, aten.add.Tensor, {"nn_module_stack": in_fc1, "source_fn_stack": [("linear", nn.Linear)],
                                          "original_aten": aten.addmm.default}, mm, x)
    half = _node(graph, aten.mul.Tensor, {"nn_module_stack": in_act, "source_fn_stack": [("gelu", nn.GELU)],
                                          "original_aten": aten.gelu.default}, bias, 0.5)
    erf = _node(graph, aten.erf.default, {"nn_module_stack": in_act, "source_fn_stack": [("gelu", nn.GELU)],
                                          "original_aten": aten.gelu.default}, half)
    relu = _node(graph, aten.relu.default, {"nn_module_stack": in_block, "source_fn_stack": [("relu", F.relu)],
                                            "original_aten": aten.relu.default}, erf)
    double = _node(graph, aten.mul.Tensor, {"nn_module_stack": in_block, "source_fn_stack": [("mul", operator.mul)],
                                            "original_aten": aten.mul.Tensor}, relu, 2)
    return graph, [mm, bias, half, erf, relu, double]


# -- FX metadata -> sources -------------------------------------------------------------------------------
def test_module_paths_are_read_below_the_frame_local():
    assert module_path("L['self'].blocks[0]._modules['fc1']") == "blocks.0.fc1"
    assert module_path("L['self'].blocks.0.act") == "blocks.0.act"
    assert module_path("G['model']._modules['layers']['3']") == "layers.3"
    assert module_path("L['self']") == ""


def test_extern_calls_are_matched_by_the_op_they_dispatch():
    assert extern_op("extern_kernels.mm") == "aten::mm"
    assert extern_op("extern_kernels.addmm") == "aten::addmm"
    assert extern_op("torch.ops.aten._scaled_dot_product_efficient_attention.default") == (
        "aten::_scaled_dot_product_efficient_attention"
    )
    assert extern_op("my_user_triton_kernel") is None  # not an op: matched by its kernel name


def test_built_in_module_classes_map_to_their_functional():
    from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

    expected = {
        nn.Linear: "linear",
        nn.GELU: "gelu",
        nn.ReLU: "relu",
        nn.LayerNorm: "layer_norm",
        nn.Conv2d: "conv2d",
        nn.BatchNorm2d: "batch_norm",
        nn.MultiheadAttention: "multi_head_attention_forward",
        nn.CrossEntropyLoss: "cross_entropy",
        NonDynamicallyQuantizableLinear: "linear",  # a torch.nn subclass: its first torch.nn ancestor
        nn.Sequential: None,
    }
    assert {cls: module_functional(cls) for cls in expected} == expected

    class Linear(nn.Module):  # a user class of that name is not nn.Linear
        pass

    assert module_functional(Linear) is None


def test_a_fused_kernel_has_one_source_per_call_latest_first():
    net = Net()
    _, nodes = _block_graph(net)
    site = site_from_nodes(3, "triton_poi_fused_addmm_gelu_mul_relu_0", nodes[1:])
    assert (site.position, site.extern, site.key) == (3, False, "triton_poi_fused_addmm_gelu_mul_relu_0")
    rows = [(s.order, s.module_path, s.module_type, s.function_name, s.op, s.source) for s in site.sources]
    # graph positions: x 0, mm 1, bias 2, half 3, erf 4, relu 5, double 6; gelu's two nodes are one call (order 4)
    assert rows == [
        (6, "blocks.0", "Block", None, "aten::mul", "mul"),
        (5, "blocks.0", "Block", "relu", "aten::relu", "relu"),
        (4, "blocks.0.act", "GELU", "gelu", "aten::gelu", "blocks.0.act"),
        (2, "blocks.0.fc1", "Linear", "linear", "aten::addmm", "blocks.0.fc1"),
    ]
    extern = site_from_nodes(0, "extern_kernels.mm", [nodes[0]], is_extern=True)
    assert (extern.extern, extern.key, [s.function_name for s in extern.sources]) == (True, "aten::mm", ["linear"])


def test_a_second_call_of_one_module_is_its_own_source():
    net = Net()
    graph = fx.Graph()
    fc1 = net.blocks[0].fc1
    first = _node(graph, aten.mm.default, {"nn_module_stack": {str(id(fc1)): ("L['self'].fc1", nn.Linear)},
                                            "source_fn_stack": [("linear", nn.Linear)]})
    again = _node(graph, aten.mm.default, {"nn_module_stack": {f"{id(fc1)}@1": ("L['self'].fc1", nn.Linear)},
                                            "source_fn_stack": [("linear_1", nn.Linear)]})
    site = site_from_nodes(0, "triton_poi_fused_0", [first, again])
    assert [s.source for s in site.sources] == ["fc1@1", "fc1"]


def test_the_fusion_rule_picks_the_latest_functional_call():
    net = Net()
    _, nodes = _block_graph(net)
    hierarchy = Hierarchy.of(list(net.modules()), [name for name, _ in net.named_modules()])
    program = Program("0/0", (site_from_nodes(0, "triton_poi_fused_0", nodes[1:]),))
    _, sources = site_tables([program], [], hierarchy)
    ranked = ranked_sources(sources)
    # rank 0: relu, the latest functional call (the later mul is no functional); then latest first
    assert ranked[["rank", "function_name", "source"]].values.tolist() == [
        [0, "relu", "relu"],
        [1, None, "mul"],
        [2, "gelu", "blocks.0.act"],
        [3, "linear", "blocks.0.fc1"],
    ]
    # names: "" 0, blocks 1, blocks.0 2, blocks.0.fc1 3, blocks.0.act 4 (found by object identity)
    assert ranked["module_id"].tolist() == [2, 2, 4, 3]


def test_a_kernel_of_no_functional_call_keeps_the_latest_source():
    net = Net()
    _, nodes = _block_graph(net)
    hierarchy = Hierarchy.of(list(net.modules()), [name for name, _ in net.named_modules()])
    program = Program("0/0", (site_from_nodes(0, "triton_poi_fused_mul_0", nodes[5:]),))
    _, sources = site_tables([program], [], hierarchy)
    assert ranked_sources(sources)[["rank", "function_name", "op"]].values.tolist() == [[0, None, "aten::mul"]]


def test_modules_resolve_by_identity_then_by_path():
    net = Net()
    names = [name for name, _ in net.named_modules()]
    hierarchy = Hierarchy.of(list(net.modules()), names)
    _, nodes = _block_graph(net)
    by_identity = site_from_nodes(0, "k", [nodes[0]]).sources[0]
    assert hierarchy.resolve(by_identity) == (names.index("blocks.0.fc1"), 1)
    other = Net()  # the same paths, other objects: by path (relative to the root here), weakly
    assert Hierarchy.of(list(other.modules()), names).resolve(by_identity) == (names.index("blocks.0.fc1"), 2)
    # below a compiled submodule: "fc1" ends two names, so it is not guessed
    relative = site_from_nodes(0, "k", [_retargeted(nodes[0], "L['self'].fc1")]).sources[0]
    assert Hierarchy.of(list(other.modules()), names).resolve(relative) == (schema.NO_MODULE, 0)


def _retargeted(node: fx.Node, path: str) -> fx.Node:
    graph = fx.Graph()
    copy = graph.call_function(node.target, ())
    copy.meta.update(node.meta, nn_module_stack={"unknown": (path, nn.Linear)})
    return copy


def test_earlier_programs_are_kept_only_for_this_hierarchy():
    net, stranger = Net(), nn.Sequential(nn.Conv2d(1, 1, 1))
    _, nodes = _block_graph(net)
    program = Program("0/0", (site_from_nodes(0, "triton_poi_fused_0", nodes[1:]),))
    mine = Hierarchy.of(list(net.modules()), [n for n, _ in net.named_modules()])
    theirs = Hierarchy.of(list(stranger.modules()), [n for n, _ in stranger.named_modules()])
    assert site_tables([], [program], mine)[0].num_rows == 0  # never bound to net's objects
    forget_programs()
    remember([program], list(net.modules()))
    (program,) = remembered_programs()
    assert site_tables([], [program], mine)[0]["priority"].to_pylist() == [1]  # bound, by identity
    assert site_tables([], [program], theirs)[0].num_rows == 0  # another model's graph
    lookalike = Net()  # the same names and types, other objects: not this model's graph
    lookalike_hierarchy = Hierarchy.of(list(lookalike.modules()), [n for n, _ in lookalike.named_modules()])
    assert site_tables([], [program], lookalike_hierarchy)[0].num_rows == 0
    forget_programs()
    assert site_tables([program], [program], mine)[0]["priority"].to_pylist() == [0]  # the same program once


def _names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_modules()]


def test_a_remembered_program_runs_for_another_instance_of_the_same_tree_while_dynamo_holds_it(monkeypatch):
    """Dynamo runs one compiled graph for every instance whose guards pass: a second instance compiles
    nothing, and the remembered program names the first instance's modules."""
    import types
    import weakref

    from aitune_dispatch.provenance import inductor as compiled

    def frame() -> None:  # the code object Dynamo compiled
        pass

    dynamo_code = compile("pass", "<dynamo>", "exec")  # its compiled code, in Dynamo's cache for compile id 0/0
    cache = [types.SimpleNamespace(compile_id="0/0", code=dynamo_code)]
    monkeypatch.setattr(compiled, "_cache_entries", lambda ref: cache if ref and ref() is frame.__code__ else [])
    net = Net()
    _, nodes = _block_graph(net)
    site = site_from_nodes(0, "triton_poi_fused_0", nodes[:4])  # blocks.0.fc1's linear and blocks.0.act's gelu
    forget_programs()
    remember([Program("0/0", (site,), frame=weakref.ref(frame.__code__))], list(net.modules()), _names(net))
    (program,) = remembered_programs()
    assert program.tree[:3] == (("", "Net"), ("blocks", "ModuleList"), ("blocks.0", "Block"))

    def resolved(model: nn.Module) -> list[tuple[int, str | None, str | None]]:
        """(priority, module name, functional) of each source, as the sites of ``model``'s run."""
        names = _names(model)
        sites, sources = site_tables([], [program], Hierarchy.of(list(model.modules()), names))
        priority = dict(zip(sites["site_id"].to_pylist(), sites["priority"].to_pylist()))
        return [
            (priority[row["site_id"]], names[row["module_id"]] if row["module_id"] >= 0 else None, row["function_name"])
            for row in sources.to_pylist()
        ]

    twin = Net()  # another instance: by path and type, below its root
    assert resolved(twin) == [(2, "blocks.0.act", "gelu"), (2, "blocks.0.fc1", "linear")]
    assert resolved(net) == [(1, "blocks.0.act", "gelu"), (1, "blocks.0.fc1", "linear")]  # its own: by identity
    inside = nn.Sequential(nn.Linear(2, 2), Net())  # the same tree below a module: relative to it
    assert resolved(inside) == [(2, "1.blocks.0.act", "gelu"), (2, "1.blocks.0.fc1", "linear")]
    bigger = Net()
    bigger.blocks.append(Block())  # the sources' paths resolve, but its guards could not pass: another graph
    assert resolved(bigger) == []
    assert resolved(nn.ModuleList([Net(), Net()])) == []  # either could be running it: not guessed
    cache.clear()  # torch._dynamo.reset(), or the graph recompiled away: what runs now is no longer it
    assert resolved(twin) == []
    assert resolved(net) == [(1, "blocks.0.act", "gelu"), (1, "blocks.0.fc1", "linear")]
    forget_programs()


# -- matching launches: synthetic activity -----------------------------------------------------------------
MODULES = pa.table(
    {
        "module_id": [0, 1, 2, 3, 4],
        "module_name": ["", "blocks.0.fc1", "blocks.0.act", "blocks.1.fc1", "blocks.1.act"],
        "module_type": ["Net", "Linear", "GELU", "Linear", "GELU"],
        "parent_module_id": [-1, 0, 0, 0, 0],
    },
    schema=schema.MODULES,
)
EAGER_CALL = pa.table(
    {"call_id": [0], "function_name": ["linear"], "parent_call_id": [-1], "module_id": [1], "start_ns": [5],
     "end_ns": [9], "thread": [0], "sample": [0]},
    schema=schema.CALLS,
)


def _sites() -> tuple[pa.Table, pa.Table]:
    """Two identical blocks: Inductor reuses one Triton kernel for both; each linear is an extern mm."""
    sites = pa.table(
        {"site_id": [0, 1, 2, 3], "program_id": [0] * 4, "position": [0, 1, 2, 3],
         "extern": [True, False, True, False],
         "key": ["aten::mm", "triton_poi_fused_gelu_0", "aten::mm", "triton_poi_fused_gelu_0"],
         "priority": [0] * 4},
        schema=schema.SITES,
    )
    sources = pa.table(
        {"site_id": [0, 1, 1, 2, 3, 3], "order": [1, 2, 4, 5, 6, 8], "module_id": [1, 1, 2, 3, 3, 4],
         "function_name": ["linear", "linear", "gelu", "linear", "linear", "gelu"],
         "op": ["aten::addmm", "aten::addmm", "aten::gelu", "aten::addmm", "aten::addmm", "aten::gelu"],
         "source": ["fc1", "fc1", "act", "fc1_1", "fc1_1", "act_1"]},
        schema=schema.SITE_SOURCES,
    )
    return sites, sources


def _activity(rows: list[tuple]) -> pa.Table:
    """Rows of (kernel, op_id, op, module_id, call_id, function_name, graph_id, graph_node_id, correlation_id)."""
    columns = list(zip(*rows))
    n = len(rows)
    return pa.table(
        {
            "correlation_id": columns[8], "kernel": columns[0], "kind": ["kernel"] * n,
            "start_ns": [100 * i for i in range(n)], "end_ns": [100 * i + 50 for i in range(n)],
            "kernel_us": [0.05] * n, "device": pa.array([0] * n, pa.int32()), "stream": [7] * n,
            "op_id": pa.array(columns[1], pa.int64()), "op": pa.array(columns[2], pa.string()),
            "module_id": columns[3], "module_name": [None] * n, "call_id": columns[4],
            "function_name": pa.array(columns[5], pa.string()), "thread": [0] * n,
            "graph_id": columns[6], "graph_node_id": columns[7], "attribution": ["trace"] * n,
        },
        schema=schema.ACTIVITY,
    )


def test_compiled_launches_go_to_their_sites_in_launch_order():
    # two runs of the compiled graph (extern mm ops 0..3; Triton kernels launched outside any op), with
    # an eager linear in between: it keeps its call and does not count as a launch of the graph
    activity = _activity(
        [
            ("gemm", 0, "aten::mm", 0, -1, None, 0, 0, 1),
            ("triton_poi_fused_gelu_0", None, None, 0, -1, None, 0, 0, 2),
            ("gemm", 1, "aten::mm", 0, -1, None, 0, 0, 3),
            ("triton_poi_fused_gelu_0", None, None, 0, -1, None, 0, 0, 4),
            ("gemm", 9, "aten::mm", 1, 0, "linear", 0, 0, 5),  # eager: inside functional call 0
            ("gemm", 2, "aten::mm", 0, -1, None, 0, 0, 6),
            ("triton_poi_fused_gelu_0", None, None, 0, -1, None, 0, 0, 7),
            ("gemm", 3, "aten::mm", 0, -1, None, 0, 0, 8),
            ("triton_poi_fused_gelu_0", None, None, 0, -1, None, 0, 0, 9),
        ]
    )
    sites, sources = _sites()
    result = attribute(activity, EAGER_CALL, MODULES, sites, sources)
    rows = result.activity.to_pydict()
    # the k-th mm op goes to extern site k mod 2 (fc1 of block 0, then of block 1), the k-th
    # triton_gelu to Triton site k mod 2, whose latest functional call is gelu (its bias add is fc1's)
    assert rows["module_name"] == ["blocks.0.fc1", "blocks.0.act", "blocks.1.fc1", "blocks.1.act", "blocks.0.fc1",
                                   "blocks.0.fc1", "blocks.0.act", "blocks.1.fc1", "blocks.1.act"]
    assert rows["function_name"] == ["linear", "gelu", "linear", "gelu", "linear", "linear", "gelu", "linear", "gelu"]
    # an extern launch keeps the op it dispatched; a Triton launch gets the source's original_aten
    assert rows["op"] == ["aten::mm", "aten::gelu", "aten::mm", "aten::gelu", "aten::mm", "aten::mm", "aten::gelu",
                          "aten::mm", "aten::gelu"]
    assert rows["attribution"] == ["inductor"] * 4 + ["trace"] + ["inductor"] * 4
    # calls: 1 eager + 4 per run x 2 runs = 9, the new ones numbered from 1, untimed and unsampled
    assert rows["call_id"] == [1, 2, 3, 4, 0, 5, 6, 7, 8]
    assert result.calls.num_rows == 1 + 8 and result.compiled_rows == 8
    added = result.calls.slice(1).to_pydict()
    assert added["function_name"] == ["linear", "gelu", "linear", "gelu"] * 2
    assert added["module_id"] == [1, 2, 3, 4] * 2
    assert set(added["start_ns"]) == set(added["end_ns"]) == {0} and set(added["sample"]) == {-1}
    # every source of each fused kernel: 2 runs x (2 gemm calls x 1 source + 2 gelu calls x 2 sources) = 12
    sources_rows = result.kernel_sources.to_pydict()
    assert len(sources_rows["call_id"]) == 12
    gelu_call = [(r, f) for c, r, f in zip(sources_rows["call_id"], sources_rows["rank"],
                                          sources_rows["function_name"]) if c == 2]
    assert gelu_call == [(0, "gelu"), (1, "linear")]


def test_without_sites_nothing_changes_and_inductor_kernels_are_counted():
    activity = _activity(
        [("triton_poi_fused_gelu_0", None, None, 0, -1, None, 0, 0, 1), ("gemm", 0, "aten::mm", 0, -1, None, 0, 0, 2)]
    )
    result = attribute(activity, EAGER_CALL, MODULES)
    assert result.activity.equals(activity) and result.calls.equals(EAGER_CALL)
    assert result.unmatched_inductor_rows == 1  # a name Inductor generates ("triton_"), with no site


def test_graph_replays_take_their_capture_and_unknown_replays_their_launch():
    captured = pa.table(
        {"graph_id": [9, 9], "graph_node_id": [100, 101], "capture": [0, 0], "op_id": [4, -1],
         "op": ["aten::addmm", None], "module_id": [1, 2], "call_id": [3, 5],
         "function_name": ["linear", "gelu"], "site_id": [-1, -1]},
        schema=schema.CAPTURED_NODES,
    )
    # two replays (launch correlation ids 50 and 60) of nodes 100 and 101, and a node captured unseen
    activity = _activity(
        [
            ("gemm", None, None, 0, -1, None, 9, 100, 50),
            ("gelu_k", None, None, 0, -1, None, 9, 101, 50),
            ("gemm", None, None, 0, -1, None, 9, 100, 60),
            ("gelu_k", None, None, 0, -1, None, 9, 101, 60),
            ("other", None, None, 0, -1, None, 7, 1, 70),
        ]
    )
    result = attribute(activity, EAGER_CALL, MODULES, captured=captured)
    rows = result.activity.to_pydict()
    assert rows["attribution"] == ["graph_capture"] * 4 + ["graph_launch"]
    assert rows["function_name"] == ["linear", "gelu", "linear", "gelu", None]
    assert rows["module_name"] == ["blocks.0.fc1", "blocks.0.act", "blocks.0.fc1", "blocks.0.act", ""]
    assert rows["op"] == ["aten::addmm", None, "aten::addmm", None, "cudaGraphLaunch"]
    # one call per (replay, capture-time call): 2 x 2, after the eager call 0
    assert rows["call_id"] == [1, 2, 3, 4, -1]
    assert (result.graph_rows, result.graph_rows_from_capture) == (5, 4)


def test_a_replay_reporting_another_graph_id_is_found_by_its_node_id():
    captured = pa.table(
        {"graph_id": [9, 9], "graph_node_id": [100, 101], "capture": [0, 0], "op_id": [4, -1],
         "op": ["aten::addmm", None], "module_id": [1, 2], "call_id": [3, 5],
         "function_name": ["linear", "gelu"], "site_id": [-1, -1]},
        schema=schema.CAPTURED_NODES,
    )
    # graph 77 (the exec graph's id, say) with node 101, which only one captured node has
    activity = _activity([("gelu_k", None, None, 0, -1, None, 77, 101, 50), ("k", None, None, 0, -1, None, 77, 5, 50)])
    rows = attribute(activity, EAGER_CALL, MODULES, captured=captured).activity.to_pydict()
    assert rows["function_name"] == ["gelu", None] and rows["attribution"] == ["graph_capture", "graph_launch"]


def test_captured_nodes_follow_clones_to_the_launch_that_created_them():
    base = schema.SCOPE_BASE
    rows = pa.table(
        {
            "event": pa.array([0, 0, 0, 0, 1, 1], pa.int8()),
            "graph_id": [1, 1, 1, 2, 2, 2],
            "node_id": [10, 11, 12, 20, 20, 21],
            # an op, a scope, nothing (created outside the trace), and the clone 2/20 created again at
            # instantiation inside scope 0: the clone's original wins
            "external_id": [0, base + 1, -1, base + 0, -1, -1],
            "original_graph_id": [0, 0, 0, 0, 1, 1],
            "original_node_id": [0, 0, 0, 0, 10, 11],
            "node_type": pa.array([0] * 6, pa.int32()),
        },
        schema=schema.GRAPH_NODES,
    )
    ops = pa.table({"op_id": [0], "op": ["aten::mm"], "module_id": [1], "call_id": [0], "thread": [0],
                    "start_ns": [0], "end_ns": [0]}, schema=schema.OPS)
    calls = pa.table({"call_id": [0, 1], "function_name": ["linear", "gelu"], "parent_call_id": [-1, -1],
                      "module_id": [1, 2], "start_ns": [0, 0], "end_ns": [0, 0], "thread": [0, 0],
                      "sample": [-1, -1]}, schema=schema.CALLS)
    contexts = pa.table({"context_id": [0, 1], "module_id": [0, 2], "call_id": [-1, 1]}, schema=schema.CONTEXTS)
    table = captured_nodes(rows, ops, calls, contexts, capture=0).sort_by([("graph_id", "ascending"),
                                                                           ("graph_node_id", "ascending")])
    got = table.select(["graph_id", "graph_node_id", "op", "module_id", "call_id", "function_name"]).to_pylist()
    assert [tuple(r.values()) for r in got] == [
        (1, 10, "aten::mm", 1, 0, "linear"),
        (1, 11, None, 2, 1, "gelu"),
        (2, 20, "aten::mm", 1, 0, "linear"),
        (2, 21, None, 2, 1, "gelu"),
    ]


def test_an_extern_call_captured_into_a_graph_gets_its_site():
    # reduce-overhead: the compiled graph is captured; its mm op ran outside any functional call
    sites, _ = _sites()
    rows = pa.table(
        {"event": pa.array([0, 0], pa.int8()), "graph_id": [3, 3], "node_id": [1, 2], "external_id": [0, 1],
         "original_graph_id": [0, 0], "original_node_id": [0, 0], "node_type": pa.array([0, 0], pa.int32())},
        schema=schema.GRAPH_NODES,
    )
    ops = pa.table({"op_id": [0, 1], "op": ["aten::mm", "aten::mm"], "module_id": [0, 0], "call_id": [-1, -1],
                    "thread": [0, 0], "start_ns": [0, 0], "end_ns": [0, 0]}, schema=schema.OPS)
    table = captured_nodes(rows, ops, schema.empty(schema.CALLS), schema.empty(schema.CONTEXTS), 0, sites)
    assert table["site_id"].to_pylist() == [0, 2]  # the first mm is block 0's fc1, the second block 1's


def test_module_stack_entries_written_as_strings_resolve_like_classes():
    # some torch versions store nn_module_stack values as (path, "qualified.class.Name") strings,
    # and write paths from the frame's `self`: both must name the same module as the class form
    from aitune_dispatch.provenance.inductor import module_path, module_type_name

    assert module_type_name("torch.nn.modules.linear.Linear") == module_type_name(torch.nn.Linear) == "Linear"
    assert module_path("self._modules['0']") == module_path("L['self']._modules['0']") == "0"
    assert module_path("self.blocks[1]._modules['fc1']") == "blocks.1.fc1"
    assert module_path("self") == ""
