"""Every column name, Arrow schema, activity kind and metadata key of the package, in one place, so
every stage can import it while it imports nothing of the package. Units are in the names (``_ns``,
``_us``); each column's sentinel is in :data:`COLUMN_UNITS`; repeated strings are dictionary-encoded
(``docs/design.md``, "Strings in memory")."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

# every repeated string of the in-memory tables; ``encoded`` defines the same type, as it imports nothing of ours
STRING = pa.dictionary(pa.int32(), pa.string())

SCHEMA_VERSION = 1
PACKAGE_VERSION = "0.1.0"  # aitune_dispatch.__version__; saved results name the version that wrote them

NO_MODULE = -1
NO_CALL = -1
NO_SAMPLE = -1
CPU_STREAM = -1
NOT_IN_GRAPH = 0  # graph_id / graph_node_id of a kernel not launched by a CUDA graph (CUPTI's convention)
NO_SITE = -1  # site_id of a kernel that no compiled-kernel site claimed

# how an activity row got its module, functional call and op (the ``attribution`` column)
ATTRIBUTION_TRACE = "trace"  # the tracer saw the launch: the op or scope it ran in
ATTRIBUTION_INDUCTOR = "inductor"  # an Inductor kernel, from the FX nodes it was generated from
ATTRIBUTION_GRAPH_CAPTURE = "graph_capture"  # a CUDA graph replay, from the launch recorded at capture
ATTRIBUTION_GRAPH_LAUNCH = "graph_launch"  # a replay of a graph captured where profile() could not see it
# an op autograd ran in backward: the module and call of the forward op that created its node (tracing/links.py)
ATTRIBUTION_BACKWARD = "backward"
ATTRIBUTION_OPTIMIZER = "optimizer"  # an op inside an optimizer's step() or zero_grad()
ATTRIBUTIONS = (
    ATTRIBUTION_TRACE,
    ATTRIBUTION_INDUCTOR,
    ATTRIBUTION_GRAPH_CAPTURE,
    ATTRIBUTION_GRAPH_LAUNCH,
    ATTRIBUTION_BACKWARD,
    ATTRIBUTION_OPTIMIZER,
)
# the op of a replayed kernel whose capture was not seen: the launch that replayed it
GRAPH_LAUNCH_OP = "cudaGraphLaunch"

# -- the spec's function_data: function_name -> [(call count, (args, kwargs)), ...] ---------------------
Sample = tuple[tuple[Any, ...], dict[str, Any]]
FunctionData = dict[str, list[tuple[int, Sample]]]

# -- activity kinds: the ``kind`` column of KERNELS and ACTIVITY ------------------------------------------
KIND_KERNEL = "kernel"
KIND_MEMCPY = "memcpy"
KIND_MEMSET = "memset"
KIND_CPU_OP = "cpu_op"  # an aten op timed on the host by the CPU activity source
ACTIVITY_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_CPU_OP)
CPU_KERNEL_PREFIX = "cpu::"  # the CPU source's kernel names: "cpu::aten::addmm"
# the names Inductor gives the kernels it generates: ``triton_<category>_<fused ops>_<n>`` (``poi``
# pointwise, ``red`` / ``per`` reductions, ``tem`` templates...) and ``cpp_fused_...`` on CPU
INDUCTOR_KERNEL = r"^(?:triton_[a-z]{3}_|cpp_fused_)"


def looks_like_inductor(name: str | None) -> bool:
    """Whether a kernel name is one Inductor generates (:data:`INDUCTOR_KERNEL`)."""
    return name is not None and re.match(INDUCTOR_KERNEL, name) is not None


# -- correlation ids: one CUPTI external-correlation kind carries op ids and scope contexts ----------------
# op ids are pushed as themselves, scope contexts as SCOPE_BASE + id, so CUPTI tags each launch with the innermost
SCOPE_BASE = 1 << 62
NO_CORRELATION = -1  # a correlation kind of -1: the activity source takes no ids (the CPU source)

# -- activity sources ---------------------------------------------------------------------------
KERNELS = pa.schema(
    [
        ("correlation_id", pa.int64()),
        ("name", STRING),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("kind", STRING),  # one of ACTIVITY_KINDS
    ]
)
# CUDA sources add the graph a kernel / copy / set was replayed from (0: not from a graph)
GRAPH_FIELDS = [("graph_id", pa.int64()), ("graph_node_id", pa.int64())]
KERNELS_WITH_GRAPHS = pa.schema([*KERNELS, *(pa.field(name, kind) for name, kind in GRAPH_FIELDS)])
CORRELATION = pa.schema([("correlation_id", pa.int64()), ("op_id", pa.int64())])
# launches made outside any aten op (Triton, CUDA graph replays, raw driver calls) still carry the
# scope they ran in: the innermost module forward or functional call, as a context id
SCOPE_CORRELATION = pa.schema([("correlation_id", pa.int64()), ("context_id", pa.int64())])
# CUDA graph nodes seen while graphs were built (provenance/graphs.py): created during a stream capture
# under the capturing thread's top external id, or cloned at instantiation (replays carry the clone's ids)
GRAPH_NODE_CREATED, GRAPH_NODE_CLONED = 0, 1
NO_EXTERNAL_ID = -1
GRAPH_NODES = pa.schema(
    [
        ("event", pa.int8()),  # GRAPH_NODE_CREATED or GRAPH_NODE_CLONED
        ("graph_id", pa.int64()),
        ("node_id", pa.int64()),
        ("external_id", pa.int64()),  # CREATED: the op id or SCOPE_BASE + context id; NO_EXTERNAL_ID
        ("original_graph_id", pa.int64()),  # CLONED: the node it was cloned from; 0 otherwise
        ("original_node_id", pa.int64()),
        ("node_type", pa.int32()),  # CUgraphNodeType (0: kernel, 1: memcpy, 2: memset, ...)
    ]
)
# one row per launch, copy or set API call (only those callback ids are enabled), sharing
# ``correlation_id`` with what it started
LAUNCHES = pa.schema(
    [
        ("correlation_id", pa.int64()),
        ("api", STRING),  # LAUNCH_API_RUNTIME (CUDA runtime API) or LAUNCH_API_DRIVER (CUDA driver API)
        ("cbid", pa.int32()),  # CUPTI callback id within that API
        ("api_name", STRING),  # "cudaLaunchKernel", "cuLaunchKernel", ...: the callback id's name
        ("start_ns", pa.int64()),  # host clock, like every activity timestamp
        ("end_ns", pa.int64()),
        ("os_thread", pa.int64()),  # CUPTI's threadId of the calling thread (not the recorder's ``thread``)
    ]
)
LAUNCH_COLUMNS = LAUNCHES.names
LAUNCH_API_RUNTIME = "runtime"  # the ``api`` of a launch record
LAUNCH_API_DRIVER = "driver"

# -- tracing ------------------------------------------------------------------------------------
OPS = pa.schema(
    [
        ("op_id", pa.int64()),
        ("op", STRING),
        ("module_id", pa.int64()),
        ("call_id", pa.int64()),
        ("thread", pa.int64()),
        ("start_ns", pa.int64()),  # host clock (time.perf_counter_ns) around the dispatch
        ("end_ns", pa.int64()),
    ]
)
# Autograd nodes a forward op created: on ``thread``, the nodes numbered ``first_seq`` to ``end_seq - 1`` (torch's
# per-thread sequence numbers) were created after the previous op of that thread ended and before this one ended
AUTOGRAD_NODES = pa.schema(
    [("op_id", pa.int64()), ("thread", pa.int64()), ("first_seq", pa.int64()), ("end_seq", pa.int64())]
)
# An op run while autograd's engine evaluated a node: the node's sequence number (-1: none, as an
# AccumulateGrad's) and the trace's thread that created it (-1: not known, the profiling thread is assumed)
BACKWARD_OPS = pa.schema([("op_id", pa.int64()), ("node_seq", pa.int64()), ("forward_thread", pa.int64())])
# ``torch.optim`` profiling scopes ("Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad")
USER_SCOPES = pa.schema(
    [("name", pa.string()), ("thread", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64())]
)
OPTIMIZER_SCOPE_PREFIX = "Optimizer."  # the scopes USER_SCOPES keeps
# ops whose module, call and attribution are not those of the stacks they ran under (tracing/links.py)
OP_LINKS = pa.schema(
    [("op_id", pa.int64()), ("module_id", pa.int64()), ("call_id", pa.int64()), ("attribution", pa.string())]
)
CALLS = pa.schema(
    [
        ("call_id", pa.int64()),
        ("function_name", STRING),
        ("parent_call_id", pa.int64()),
        ("module_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
        # index into ``function_data[function_name]`` of the call's distinct input sample; NO_SAMPLE
        # where none was collected (a name outside ``function_names``)
        ("sample", pa.int64()),
    ]
)
MODULES = pa.schema(
    [
        ("module_id", pa.int64()),
        ("module_name", STRING),
        ("module_type", STRING),
        ("parent_module_id", pa.int64()),
    ]
)
CONTEXTS = pa.schema([("context_id", pa.int64()), ("module_id", pa.int64()), ("call_id", pa.int64())])
MODULE_CALLS = pa.schema(
    [
        ("module_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
    ]
)

# Compiled-kernel sites (provenance/inductor.py): one row per launch site of an Inductor-compiled graph
# in run order, one per FX source it was generated from. ``key``: the Triton kernel name or the aten op an
# extern call dispatches (``aten::mm``). ``priority``: 0 compiled during this profile(), 1 during an earlier
# one for these modules, 2 during an earlier one for another instance of them. These three tables keep plain
# strings: they are internal to the attribution and read as DataFrames.
SITES = pa.schema(
    [
        ("site_id", pa.int64()),
        ("program_id", pa.int64()),  # one compiled graph
        ("position", pa.int64()),  # launch order within the graph
        ("extern", pa.bool_()),
        ("key", pa.string()),
        ("priority", pa.int8()),
    ]
)
SITE_SOURCES = pa.schema(
    [
        ("site_id", pa.int64()),
        ("order", pa.int64()),  # graph position of the source's last FX node (the latest computes the result)
        ("module_id", pa.int64()),  # NO_MODULE: not found in the profiled hierarchy
        ("function_name", pa.string()),  # null: not a functional call
        ("op", pa.string()),  # the aten op the FX nodes were decomposed from (``original_aten``)
        ("source", pa.string()),  # the FX source node (Dynamo's name of the call, e.g. ``linear_1``)
    ]
)
# Replayed CUDA graph nodes resolved to what launched them at capture (provenance.captured_nodes)
CAPTURED_NODES = pa.schema(
    [
        ("graph_id", pa.int64()),  # the ids replayed kernels carry (the exec graph's clone)
        ("graph_node_id", pa.int64()),
        ("capture", pa.int64()),  # which traced pass captured it (0: warm-up, 1: the recorded pass)
        ("op_id", pa.int64()),  # in that pass's trace; -1: the launch ran outside any op
        ("op", pa.string()),
        ("module_id", pa.int64()),
        ("call_id", pa.int64()),  # in that pass's trace
        ("function_name", pa.string()),
        ("site_id", pa.int64()),  # the compiled extern call it was launched by (SITES); NO_SITE otherwise
    ]
)

# -- joining ------------------------------------------------------------------------------------
ACTIVITY = pa.schema(
    [
        ("correlation_id", pa.int64()),
        ("kernel", STRING),
        ("kind", STRING),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("kernel_us", pa.float64()),
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("op_id", pa.int64()),
        ("op", STRING),
        ("module_id", pa.int64()),
        ("module_name", STRING),
        ("call_id", pa.int64()),
        ("function_name", STRING),
        ("thread", pa.int64()),
        ("graph_id", pa.int64()),  # NOT_IN_GRAPH unless replayed by a CUDA graph
        ("graph_node_id", pa.int64()),
        ("attribution", STRING),  # one of ATTRIBUTIONS
    ]
)
# Every FX source an attributed compiled kernel was generated from, one row per (synthesized call, kernel,
# source): rank 0 the call it is attributed to, then the others, latest in graph order first
KERNEL_SOURCES = pa.schema(
    [
        ("call_id", pa.int64()),  # the synthesized functional call in ``calls`` the kernel went to
        ("kernel", STRING),
        ("rank", pa.int64()),
        ("module_id", pa.int64()),
        ("module_name", STRING),
        ("function_name", STRING),
        ("op", STRING),
        ("source", STRING),
    ]
)

# op times on the host clock, for the timeline (results.views.op_times)
OP_TIMES = pa.schema([("op_id", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("thread", pa.int64())])
# what a trace lays out (results.views.trace): host spans nesting on each (rank, thread) track, ends no
# earlier than starts, ``rank`` null unmerged; per launch, its recorder thread and claiming op (null: none)
MODULE_SPANS = pa.schema(
    [
        ("module_id", pa.int64()),
        ("name", pa.string()),  # the module's label (the root: ``<Type> (root)``)
        ("module_type", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
        ("rank", pa.int64()),
    ]
)
CALL_SPANS = pa.schema(
    [
        ("call_id", pa.int64()),
        ("function_name", pa.string()),
        ("module_id", pa.int64()),
        ("module", pa.string()),  # the module's label; "" where the module is unknown
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
        ("rank", pa.int64()),
    ]
)
OP_SPANS = pa.schema(
    [
        ("op_id", pa.int64()),
        ("op", pa.string()),
        ("call_id", pa.int64()),
        ("module_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
        ("rank", pa.int64()),
        ("activity_row", pa.int64()),  # the CPU source's activity row that is this op (null: none)
    ]
)
LAUNCH_THREADS = pa.schema([("thread", pa.int64()), ("op_id", pa.int64())])

# -- saved results (results/persist.py) -------------------------------------------------------------------
RESULT_TABLES = ("activity", "ops", "calls", "modules", "module_calls", "launches", "kernel_sources")
# tables whose own ``rank`` column means something else (kernel_sources: the fusion rule's order):
# merge() adds no RANK_COLUMN to them; their rows belong to the rank of their ``call_id``
RANKED_BY_CALL = ("kernel_sources",)
FUNCTION_DATA_TABLE = "function_data"  # function_data, saved as a table beside them
# one row per distinct sample, as JSON; turned into ``function_data`` on load, so its strings stay plain
FUNCTION_DATA = pa.schema(
    [
        ("function_name", pa.string()),
        ("sample_index", pa.int64()),
        ("count", pa.int64()),
        ("sample_json", pa.string()),
    ]
)
TENSORS = pa.schema([("torch_save", pa.large_binary())])  # with_tensors=True: torch.save of the samples' tensors

# -- spec-compatible outputs (names and order are the reference's) ----------------------------------
PROFILING_COLUMNS = ["module_name", "module", "function_name", "op", "kernel", "kernel_us"]
SUMMARY_COLUMNS = [
    "function_name",
    "calls",
    "num_distinct_samples",
    "num_modules",
    "time_spent_us",
    "time_spent_pct",
    "tensor_size_MB",
]

# compare(a, b): before = a, after = b
COMPARE_COLUMNS = [
    "level",  # "function" (one row per function_name) or "kernel" (per function_name and kernel)
    "function_name",  # None: kernels that no functional call encloses
    "kernel",  # None on "function" rows
    "before_us",  # kernel time in a; 0.0 where absent
    "after_us",  # kernel time in b; 0.0 where absent
    "delta_us",  # after_us - before_us
    "ratio",  # after_us / before_us; NaN where before_us is 0
    "before_kernels",  # activity rows (kernel launches, copies, sets or CPU ops) in a; 0 where absent
    "after_kernels",
    "before_calls",  # functional calls those rows ran in, each counted once; 0 outside any call
    "after_calls",
    # with recorded steps on both sides (recording(...).step()): the change of the mean time per step, its
    # 95% bootstrap interval, and whether the interval leaves out 0; NaN / None with fewer than 2 steps a side
    "step_delta_us",
    "step_delta_low_us",
    "step_delta_high_us",
    "outside_noise",
]


# -- the views' tables (results/views) ----------------------------------------------------------------
KERNEL_COLUMNS = [
    "kernel",  # the full kernel name (CUDA), "Memcpy ..." / "Memset ...", or "cpu::<op>"
    "kind",  # one of ACTIVITY_KINDS
    "op",  # the aten op that launched it; None when no op claimed it
    "function_name",  # the innermost functional call; None outside any
    "module",  # the launching module's group label (module_groups); None outside the hierarchy
    "modules",  # distinct modules of that pattern that launched it
    "calls",  # launches (activity rows)
    "total_us",  # summed duration, microseconds
    "mean_us",  # total_us / calls
    "share",  # total_us / all kernel time (0..1)
    "short_name",  # the base name (results.views.kernel_names): no namespaces, templates, parameters
]

# kernel_rollup(): one row per kernel name
ROLLUP_COLUMNS = [
    "kernel",  # the full kernel name, as KERNEL_COLUMNS
    "kind",  # one of ACTIVITY_KINDS
    "count",  # launches (activity rows)
    "total_us",  # summed duration, microseconds
    "mean_us",  # total_us / count
    "min_us",  # the shortest launch
    "max_us",  # the longest launch
    "share",  # total_us / all kernel time (0..1)
    "short_name",  # as KERNEL_COLUMNS
]

# views.origins.kernel_origins(): per kernel name, the functional call and module pattern that spent most of it
ORIGIN_COLUMNS = [
    "kernel",
    "kind",
    "top_function",
    "top_function_us",
    "functions",
    "top_module",
    "top_module_us",
    "patterns",
    "short_name",  # as KERNEL_COLUMNS
]

MODULE_COLUMNS = [
    "pattern",  # the group label (module_groups): a layer pattern, a module name, or "<Type> (root)"
    "module_type",  # the nn.Module class name
    "depth",  # 0 for the root module, 1 for its children, ...
    "parent",  # the parent row's pattern; None for the root
    "instances",  # modules with this pattern
    "forwards",  # forward calls of those modules in the recorded pass
    "total_us",  # kernel time of the modules and their descendants, microseconds (inclusive)
    "share",  # total_us / all kernel time (0..1)
    "top_function",  # the functional call with the most kernel time in total_us; None if none
    "top_function_us",  # that call's kernel time in the modules and their descendants
    "self_us",  # kernel time launched directly in the modules, not in a submodule (own)
    "top_self_function",  # the functional call with the most kernel time in self_us; None if none
    "top_self_function_us",  # that call's kernel time launched directly in the modules
    "members",  # list of (module name, total_us), largest first: the instances behind the pattern
]

UNATTRIBUTED_COLUMNS = [
    "reason",  # one of results.views.REASONS
    "op",  # the op that launched the kernels; None when no op claimed them
    "module",  # the launching module's group label (module_groups); None outside the hierarchy
    "kernels",  # activity rows
    "total_us",  # summed duration, microseconds
    "share",  # total_us / all kernel time (0..1)
    "why",  # the reason in words
    "hint",  # what to do about it
]

SAMPLE_COLUMNS = [
    "function_name",
    "sample",  # index into function_data[function_name]
    "calls",  # recorded calls with this sample (function_data's count)
    "num_modules",  # distinct profiled modules those calls ran in (NaN where calls carry no sample links)
    "kernel_us",  # attributed kernel time of those calls; NaN where the calls carry no sample links
    "kernel_us_per_call",
    "time_spent_pct",  # of all attributed kernel time (describe_results' denominator)
    "signature",  # e.g. "f16[2,4096,320] f16[320,320] f16[320]"
]

# samples(roofline=True) and describe(roofline=True) add these (results/views/roofline.py): the work
# of the calls (torch's FLOP formulas on meta tensors; bytes a lower bound), the rates they reached
# in their measured kernel time, the device's limits (results/limits.py) and the time the limits
# say could be saved
ROOFLINE_COLUMNS = [
    "flops",  # FLOPs of all those calls; NaN where no op of the call has a formula in torch's registry
    "min_bytes",  # bytes read and written by those calls at least (inputs once, outputs once)
    "intensity",  # flops / min_bytes, FLOP per byte (an upper bound, as min_bytes is a lower one)
    "flop_per_s",  # flops / kernel time
    "bytes_per_s",  # min_bytes / kernel time (a lower bound)
    "dtype",  # the call's compute dtype (its first floating input's), which picks the peak
    "peak_flop_per_s",  # the device's dense peak for that dtype; NaN where unknown
    "peak_bytes_per_s",  # the device's memory bandwidth; NaN where unknown
    "bound",  # "compute" or "memory" (intensity against the ridge point); missing where FLOPs are unknown
    # achieved over attainable, min(peak, intensity x bandwidth); where FLOPs are unknown, bytes/s
    # over the bandwidth (a lower bound of the true fraction)
    "fraction_of_bound",
    "worth_us",  # kernel_us x (1 - fraction_of_bound): the time the hardware says could be saved
]

# benchmark(): one row per (function, sample, implementation)
BENCHMARK_COLUMNS = [
    "function_name",
    "sample",  # index into function_data[function_name]
    "implementation",  # "torch" for the original, else the candidate's name
    "calls",  # recorded calls of this sample (the weight in DataFrame.attrs["weighted"])
    "recorded_us_per_call",  # median kernel time of the recorded calls, nested calls included; NaN without links
    "us_per_call",  # median kernel time of the replayed calls; NaN where the implementation failed
    "speedup",  # the original's us_per_call / this one's (1.0 on "torch" rows)
    "kernels_match",  # "torch" rows: every replayed call launches the recorded kernel multiset; NA elsewhere
    "max_abs_error",  # largest |output - original output|; NaN where structures differ or nothing ran
    "ok",  # replayed, and (candidates) output equal to the original's within assert_close's defaults
    "error",  # why not ok; None when ok
    "replay_iqr_us",  # interquartile range of the replayed calls' kernel times (us_per_call's spread); NaN as it is
]

# -- run metadata (ProfileResult.metadata): every value is a string ------------------------------------
META_TORCH = "torch"  # torch.__version__ of the run
META_DEVICE = "device"  # "cuda" or "cpu"
META_ALLOW_TF32 = "allow_tf32"  # "True" where float32 matmuls ran on TF32 tensor cores (the roofline's float32 peak)
META_TRACER = "tracer"  # the tracing backend that ran (config.op_tracer): "native" or "python"
META_DECODER = "decoder"  # the CUPTI decoder backend: "native", "python", or "none" (CPU source)
META_THREADS_TRACED = "threads_traced"  # threads whose forwards were recorded
META_CORRELATION = "correlation"  # how CUDA launches found their op: "launch" (callback), "push", or "none" (CPU)
META_CORRELATION_PUSHES = "correlation_pushes"  # op and scope ids pushed as CUPTI external correlation ids
META_FUNCTIONS = "functions"  # "functional" or "all"
META_INTERCEPTION = "interception"  # how functional calls were seen: "objects" (function-object hooks) or "mode"
META_GPU_NAME = "gpu_name"  # CUDA runs: the GPU's name, compute capability, memory and SM count
META_GPU_CAPABILITY = "gpu_compute_capability"  # "9.0"
META_GPU_MEMORY = "gpu_memory_bytes"
META_GPU_SMS = "gpu_sm_count"
META_CLOCK_OFFSET = "activity_minus_host_ns"  # activity clock minus host clock, ns ("0": converted to host)
META_TICKS_PER_NS = "activity_ticks_per_ns"  # the rate of the activity source's clock that was converted

# seconds spent in each phase of a recorded run: metadata "seconds_<phase>" (benchmarks read them)
PHASES = ("warmup", "start", "pass", "flush", "decode", "join")


def seconds_key(phase: str) -> str:
    """The metadata key of a phase's seconds: ``seconds_pass`` for ``"pass"``."""
    return f"seconds_{phase}"


# -- several GPUs and several ranks (torch.distributed) ----------------------------------------------
# written when a torch.distributed process group is initialised; absent otherwise
RANK_KEY = "rank"  # this process's rank in the default process group
WORLD_SIZE_KEY = "world_size"
HOST_KEY = "host"  # socket.gethostname() of the rank's machine
LOCAL_RANK_KEY = "local_rank"  # the LOCAL_RANK environment variable (torchrun), where set
DISTRIBUTED_BACKEND_KEY = "distributed_backend"  # "nccl", "gloo", ...
# Written only when the recorded kernels ran on more than one GPU: the devices, comma-separated
# ("0,1"), and JSON {device: {gpu_name, gpu_compute_capability, gpu_memory_bytes, gpu_sm_count}}.
GPU_DEVICES_KEY = "gpu_devices"
GPU_PROPERTIES_KEY = "gpu_properties"
# Written by merge(): the merged ranks, comma-separated ("0,1"), and JSON {rank: {"source",
# "dropped_records", "metadata"}} keeping what each rank's own result said.
MERGED_RANKS_KEY = "merged_ranks"
RANK_METADATA_KEY = "rank_metadata"
# merge() adds this column to every table of the merged result: the rank each row comes from
RANK_COLUMN = "rank"

RANK_SUMMARY_COLUMNS = [
    "rank",
    "host",  # metadata["host"] of the rank; "" where unknown
    "devices",  # GPU devices its activity ran on, comma-separated ("" for the CPU source)
    "activity_rows",
    "total_us",  # all kernel time of the rank
    "attributed_us",  # the part profiling_df() reports
    "coverage",  # attributed_us / total_us (NaN when nothing ran)
    "collective_us",  # kernel time of collective ops (c10d::*, _c10d_functional::*, nccl* kernels)
]
RANK_FUNCTION_COLUMNS = [
    "function_name",
    "ranks",  # ranks on which the function launched attributed kernels
    "mean_us",  # attributed kernel time per rank, averaged over every merged rank (absent = 0)
    "min_us",
    "max_us",
    "slowest_rank",  # the rank with max_us (the lowest such rank on a tie)
    "imbalance",  # max_us / mean_us: 1.0 when every rank spends the same
]
COLLECTIVE_COLUMNS = [
    "rank",
    "module_name",  # the module whose forward launched it; None outside the hierarchy
    "op",  # the collective op (c10d::allreduce_, ...); None when no op claimed the kernel
    "kernel",
    "calls",  # activity rows
    "total_us",
]


# -- column name -> (unit, sentinel), "" where none; saved as Arrow field metadata; same in every table --
COLUMN_UNITS: dict[str, tuple[str, str]] = {
    "correlation_id": ("", "CUPTI correlation id (the CPU source numbers its ops)"),
    "kernel": ("", "kernel name; 'cpu::<op>' for the CPU source"),
    "name": ("", "kernel name as recorded"),
    "kind": ("", "'kernel', 'memcpy', 'memset' or 'cpu_op'"),
    "start_ns": ("ns", "host clock (time.perf_counter_ns); 0 where not timed"),
    "end_ns": ("ns", "host clock (time.perf_counter_ns); 0 where not timed"),
    "kernel_us": ("us", ""),
    "device": ("", "-1: CPU"),
    "stream": ("", "-1: CPU"),
    "op_id": ("", "null: no aten op claimed the kernel"),
    "op": ("", "null: no aten op claimed the kernel"),
    "module_id": ("", "-1: outside the profiled hierarchy"),
    "parent_module_id": ("", "-1: the root module"),
    "module_name": ("", "'' for the root module; null outside the hierarchy"),
    "module_type": ("", "the nn.Module class name"),
    "call_id": ("", "-1: no functional call encloses it"),
    "parent_call_id": ("", "-1: not nested in another functional call"),
    "function_name": ("", "null: no functional call encloses it"),
    "thread": ("", "recorder thread index, from 0"),
    "context_id": ("", ""),
    "sample_index": ("", "distinct sample number within the function, from 0"),
    "sample": ("", "index into function_data[function_name]; -1: no sample collected for this call"),
    "count": ("calls", ""),
    "sample_json": ("", "JSON; tensors as {'__tensor__': metadata}"),
    "torch_save": ("bytes", "torch.save of the sample tensors"),
    "rank": (
        "",
        "torch.distributed rank the row comes from (merged results only); in kernel_sources: the source's "
        "place in the fusion rule, 0 the one the kernel is attributed to",
    ),
    "api": ("", "'runtime' or 'driver': the CUDA API of a launch record"),
    "cbid": ("", "CUPTI callback id within the runtime or driver API"),
    "api_name": ("", "the callback id's name without CUPTI's version suffix; '<api> cbid <n>' where unnamed"),
    "os_thread": ("", "CUPTI threadId of the launching thread"),
    "graph_id": ("", "CUPTI graph id of the replaying graph; 0: not launched by a CUDA graph"),
    "graph_node_id": ("", "CUPTI id of the graph node; 0: not launched by a CUDA graph"),
    "attribution": ("", "'trace', 'inductor', 'graph_capture' or 'graph_launch'"),
    "source": ("", "FX source node of a compiled kernel"),
}

# result metadata keys added by compiled / graphed attribution (values are short sentences)
# recording() with steps: the host-clock (perf_counter_ns) bounds of the recorded steps, comma-separated
# (step k of the recording runs from bound k to bound k+1), and the number of the first recorded step
META_STEP_BOUNDS = "step_bounds_ns"
META_FIRST_STEP = "first_step"
META_INDUCTOR = "inductor_provenance"  # how compiled kernels were attributed, or why not
META_GRAPH_CAPTURE = "graph_capture"  # whether CUDA graph captures were observed, or why not
META_COMPILED_KERNELS = "compiled_kernels_attributed"  # activity rows attributed from Inductor provenance
META_GRAPH_KERNELS = "graph_kernels"  # activity rows replayed by CUDA graphs (and how many were mapped)

def field_metadata(name: str) -> dict[bytes, bytes]:
    """Arrow field metadata for column ``name``: ``unit`` and ``sentinel`` (empty dict if unknown)."""
    unit, sentinel = COLUMN_UNITS.get(name, ("", ""))
    if name not in COLUMN_UNITS:
        return {}
    return {b"unit": unit.encode(), b"sentinel": sentinel.encode()}


def empty(schema: pa.Schema) -> pa.Table:
    """An empty table of ``schema``, so that empty results keep their columns."""
    return schema.empty_table()
