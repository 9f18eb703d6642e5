"""The native CUPTI decoder and its pure-Python twin, on buffers built from cupti-python's record dtypes.

Every decoding test runs on both backends (``decode`` fixture): ``cupti_native.decode_buffer``
and ``native.decode_buffer_py`` take the same arguments and must return the same raw columns.
The native cases skip, with the reason in the summary, only where the extension did not build.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import random
import types
from collections.abc import Callable

import numpy as np
import pytest
from fixture_models import NATIVE_MISSING, cupti_native, needs_native

from aitune_dispatch.collection import native
from aitune_dispatch.collection.cupti_source import callback_names
from aitune_dispatch.collection.decoded import API_DRIVER, API_RUNTIME, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET
from aitune_dispatch.collection.libcupti import cupti_python_version
from aitune_dispatch.collection.native import NativeRecordSink, decode_buffer_py, to_decoded
from aitune_dispatch.collection.python import PythonRecordSink

cupti = pytest.importorskip("cupti.cupti", reason="cupti-python provides the record dtypes these buffers use")


KINDS = cupti.ActivityKind
# the installed cupti-python's records (Kernel9 in 12.x, Kernel10 in 13.x; either naming scheme)
KERNEL_DTYPE = native.cupti_dtype(cupti, "kernel")
MEMCPY_DTYPE = native.cupti_dtype(cupti, "memcpy")
MEMSET_DTYPE = native.cupti_dtype(cupti, "memset")
LINK_DTYPE = native.cupti_dtype(cupti, "external_correlation")
API_DTYPE = native.cupti_dtype(cupti, "api")
CUPTI_PYTHON_MAJOR = int(cupti_python_version().split(".")[0])
MAJORS = sorted(native.RECORD_BYTES)  # every CUPTI record layout the decoders know: 12 and 13
OURS = int(cupti.ExternalCorrelationKind.CUSTOM2)
OTHER = int(cupti.ExternalCorrelationKind.CUSTOM0)
HTOD, PINNED, DEVICE = 1, 2, 3  # CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind codes

# kernel names live in C memory, as CUPTI's do; records carry their addresses
GEMM = ctypes.create_string_buffer(b"void gemm<128>(float const*, float*)")
RELU = ctypes.create_string_buffer(b"elementwise_relu")
GEMM_AGAIN = ctypes.create_string_buffer(GEMM.value)  # same text at another address


# The dtypes the builders below write records with: cupti-python's, or (for the duration of a test
# the ``decode`` fixture runs in an explicit layout) those of native.record_dtype for CUPTI 12 or 13.
DTYPES = {"kernel": KERNEL_DTYPE, "memcpy": MEMCPY_DTYPE, "memset": MEMSET_DTYPE, "correlation": LINK_DTYPE,
          "api": API_DTYPE}  # fmt: skip
LAYOUT: dict[str, int | None] = {"major": None}  # the CUPTI major of the buffers built now; None: cupti-python's


def _record(dtype: np.dtype, kind: int, **fields: int) -> bytes:
    """One record; fields the dtype lacks (an explicit layout names only those decoded) stay zero."""
    row = np.zeros(1, dtype)
    row["kind"] = kind
    for name, value in fields.items():
        if name in dtype.names:
            row[name] = value
    return row.tobytes()


def kernel(
    correlation: int,
    start: int,
    name: ctypes.Array | None,
    device: int = 0,
    stream: int = 7,
    graph: tuple[int, int] = (0, 0),
) -> bytes:
    """A concurrent-kernel record lasting 40 ns; ``graph`` = (graph id, graph node id) of a replay."""
    address = ctypes.addressof(name) if name is not None else 0
    return _record(
        DTYPES["kernel"],
        int(KINDS.CONCURRENT_KERNEL),
        correlation_id=correlation,
        start=start,
        end=start + 40,
        device_id=device,
        stream_id=stream,
        name=address,
        graph_id=graph[0],
        graph_node_id=graph[1],
    )


def memcpy(
    correlation: int,
    start: int,
    copy: int = HTOD,
    src: int = PINNED,
    dst: int = DEVICE,
    graph: tuple[int, int] = (0, 0),
) -> bytes:
    return _record(
        DTYPES["memcpy"],
        int(KINDS.MEMCPY),
        correlation_id=correlation,
        start=start,
        end=start + 40,
        device_id=0,
        stream_id=7,
        copy_kind=copy,
        src_kind=src,
        dst_kind=dst,
        bytes=4096,
        graph_id=graph[0],
        graph_node_id=graph[1],
    )


def memset(correlation: int, start: int, memory: int = DEVICE, graph: tuple[int, int] = (0, 0)) -> bytes:
    return _record(
        DTYPES["memset"],
        int(KINDS.MEMSET),
        correlation_id=correlation,
        start=start,
        end=start + 40,
        device_id=0,
        stream_id=7,
        memory_kind=memory,
        bytes=512,
        graph_id=graph[0],
        graph_node_id=graph[1],
    )


def link(correlation: int, op_id: int, external_kind: int = OURS) -> bytes:
    return _record(
        DTYPES["correlation"],
        int(KINDS.EXTERNAL_CORRELATION),
        external_kind=external_kind,
        external_id=op_id,
        correlation_id=correlation,
    )


# cudaLaunchKernel_v7000, cudaMemcpyAsync_v3020, cuLaunchKernel
LAUNCH_KERNEL, MEMCPY_ASYNC, CU_LAUNCH_KERNEL = 211, 41, 307


def api(correlation: int, driver: bool = False, start: int = 0, cbid: int = 0, thread: int = 4242) -> bytes:
    """A runtime (or driver) API record lasting 30 ns, by default cudaLaunchKernel / cuLaunchKernel."""
    return _record(
        DTYPES["api"],
        int(KINDS.DRIVER if driver else KINDS.RUNTIME),
        correlation_id=correlation,
        cbid=cbid or (CU_LAUNCH_KERNEL if driver else LAUNCH_KERNEL),
        start=start,
        end=start + 30,
        process_id=99,
        thread_id=thread,
        return_value=0,
    )


def one_pass() -> bytes:
    """Six activity rows of four ops, as CUPTI interleaves them: 6 + 5 links + 4 API = 15 records."""
    # fmt: off
    return b"".join(
        [
            api(1, start=900), link(1, 100), kernel(1, 1_000, GEMM),
            api(2, start=950), link(2, 101), link(2, 900, OTHER), kernel(2, 1_100, RELU),
            api(3, start=1_010, cbid=MEMCPY_ASYNC), link(3, 102), memcpy(3, 1_200),
            api(4, driver=True, start=1_020, thread=4343), link(4, 103), memset(4, 1_300),
            kernel(5, 1_400, GEMM), kernel(6, 1_500, RELU),
        ]
    )
    # fmt: on


Decode = Callable[..., tuple]
BACKENDS = [pytest.param("native", marks=needs_native), "python"]


LAYOUTS = [None, *MAJORS]  # cupti-python's record dtypes, then the explicit CUDA 12 and CUDA 13 layouts


@pytest.fixture(params=LAYOUTS, ids=lambda major: "cupti-python" if major is None else f"cuda{major}")
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int | None:
    """Build this test's records in one layout: cupti-python's, or CUPTI 12's (Kernel9) or 13's (Kernel10)."""
    major = request.param
    if major is not None:
        monkeypatch.setitem(LAYOUT, "major", major)
        for record in DTYPES:
            monkeypatch.setitem(DTYPES, record, native.record_dtype(record, major))
    return major


@pytest.fixture(params=BACKENDS)
def decode(request: pytest.FixtureRequest, layout: int | None) -> Decode:
    """``decode_buffer`` of one backend (the extension, or its pure-Python twin), reading ``layout``'s records."""
    function = cupti_native.decode_buffer if request.param == "native" else decode_buffer_py
    return function if layout is None else functools.partial(function, cupti_major=layout)


def test_native_extension_is_built():
    if cupti_native is None:
        if os.environ.get("AITUNE_DISPATCH_NATIVE") == "require":
            pytest.fail(NATIVE_MISSING)
        pytest.skip(NATIVE_MISSING)
    version = cupti_native.CUPTI_API_VERSION  # the headers': 24..28 for CUDA 12.6+, 130000 and up for 13.x
    assert cupti_native.CUPTI_HEADER_MAJOR == (13 if version >= 130000 else 12)
    assert 24 <= version < 10000 or 130000 <= version < 140000


@needs_native
def test_compiled_record_sizes_match_cupti_python_dtypes():
    sizes = cupti_native.record_sizes()
    assert sizes == {kind: layout.size for kind, layout in native.record_layouts().items()}
    kernel_bytes = {12: 208, 13: 216}[CUPTI_PYTHON_MAJOR]  # Kernel9 / Kernel10
    assert sizes[int(KINDS.CONCURRENT_KERNEL)] == sizes[int(KINDS.KERNEL)] == KERNEL_DTYPE.itemsize == kernel_bytes
    assert sizes[int(KINDS.MEMCPY)] == MEMCPY_DTYPE.itemsize == 96
    assert sizes[int(KINDS.MEMSET)] == MEMSET_DTYPE.itemsize == 88
    assert sizes[int(KINDS.EXTERNAL_CORRELATION)] == LINK_DTYPE.itemsize == 24
    assert sizes[int(KINDS.RUNTIME)] == sizes[int(KINDS.DRIVER)] == API_DTYPE.itemsize == 40
    assert all(size % 8 == 0 for size in sizes.values())  # CUPTI pads records to 8 bytes


def test_one_pass_decodes_to_exact_columns(decode: Decode):
    records = to_decoded(decode(one_pass(), OURS))
    # rows in delivery order: kernel 1, kernel 2, memcpy 3, memset 4, kernel 5, kernel 6
    assert records.correlation_id.tolist() == [1, 2, 3, 4, 5, 6]
    assert records.start_ns.tolist() == [1_000, 1_100, 1_200, 1_300, 1_400, 1_500]  # 1_000 + 100 * i
    assert (records.end_ns - records.start_ns).tolist() == [40] * 6
    assert records.device.tolist() == [0] * 6 and records.stream.tolist() == [7] * 6
    assert records.kind_code.tolist() == [KIND_KERNEL, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_KERNEL, KIND_KERNEL]
    assert records.names == [
        GEMM.value.decode(),
        "elementwise_relu",
        "Memcpy HtoD (Pinned -> Device)",
        "Memset (Device)",
    ]
    assert records.name_index.tolist() == [0, 1, 2, 3, 0, 1]
    # CUSTOM0's link (correlation 2 -> 900) is another client's: filtered out
    assert records.ext_correlation_id.tolist() == [1, 2, 3, 4]
    assert records.ext_id.tolist() == [100, 101, 102, 103]
    assert records.records == 15  # 6 rows + 5 links + 4 API records
    # API rows in delivery order: runtime 1, 2, 3 and driver 4 (kernels 5 and 6 came without one)
    assert records.api_correlation_id.tolist() == [1, 2, 3, 4]
    assert records.api_kind.tolist() == [API_RUNTIME, API_RUNTIME, API_RUNTIME, API_DRIVER]
    assert records.api_cbid.tolist() == [LAUNCH_KERNEL, LAUNCH_KERNEL, MEMCPY_ASYNC, CU_LAUNCH_KERNEL]
    assert records.api_start_ns.tolist() == [900, 950, 1_010, 1_020]
    assert (records.api_end_ns - records.api_start_ns).tolist() == [30] * 4
    assert records.api_thread.tolist() == [4242, 4242, 4242, 4343]
    assert records.api_correlation_id.dtype == records.api_start_ns.dtype == records.api_thread.dtype == np.int64
    assert records.api_kind.dtype == np.int8 and records.api_cbid.dtype == np.int32
    dtypes = [records.correlation_id, records.start_ns, records.end_ns, records.device, records.stream]
    assert {a.dtype for a in dtypes} == {np.dtype(np.int64)}
    assert records.kind_code.dtype == np.int8 and records.name_index.dtype == np.int32
    assert records.ext_correlation_id.dtype == records.ext_id.dtype == np.int64


def test_tables_follow_the_schema(decode: Decode):
    records = to_decoded(decode(one_pass(), OURS))
    kernels = records.kernels_table().to_pydict()
    assert kernels["name"][2:4] == ["Memcpy HtoD (Pinned -> Device)", "Memset (Device)"]
    assert kernels["kind"] == ["kernel", "kernel", "memcpy", "memset", "kernel", "kernel"]
    assert records.correlation_table().to_pydict() == {"correlation_id": [1, 2, 3, 4], "op_id": [100, 101, 102, 103]}
    launches = records.launches_table(callback_names(cupti)).to_pydict()
    assert launches == {
        "correlation_id": [1, 2, 3, 4],
        "api": ["runtime", "runtime", "runtime", "driver"],
        "cbid": [211, 211, 41, 307],
        "api_name": ["cudaLaunchKernel", "cudaLaunchKernel", "cudaMemcpyAsync", "cuLaunchKernel"],  # suffix dropped
        "start_ns": [900, 950, 1_010, 1_020],
        "end_ns": [930, 980, 1_040, 1_050],
        "os_thread": [4242, 4242, 4242, 4343],
    }


def test_a_callback_id_without_a_name_is_named_by_its_number(decode: Decode):
    records = to_decoded(decode(api(1, cbid=9_999) + api(2, driver=True, cbid=9_998), OURS))
    assert records.launches_table(callback_names(cupti))["api_name"].to_pylist() == [
        "runtime cbid 9999",
        "driver cbid 9998",
    ]


def test_graph_ids_of_replayed_rows_are_decoded(decode: Decode):
    # a replayed graph's kernel, copy and set carry its graph id and their node ids; others carry 0
    big = 2**40 + 3  # node ids are uint64: more than 32 bits survive
    buffer = (
        kernel(1, 100, GEMM, graph=(5, big)) + memcpy(1, 200, graph=(5, 7)) + memset(1, 300, graph=(5, 8))
        + kernel(2, 400, RELU)
    )
    records = to_decoded(decode(buffer, OURS))
    assert records.graph_id.tolist() == [5, 5, 5, 0]
    assert records.graph_node_id.tolist() == [big, 7, 8, 0]
    table = records.kernels_table()
    assert table.schema.names[-2:] == ["graph_id", "graph_node_id"]
    assert table["graph_node_id"].to_pylist() == [big, 7, 8, 0]


def test_a_decode_without_graph_columns_reads_as_outside_graphs(decode: Decode):
    # an extension built before the graph columns returns 11 entries: its rows read as graph 0
    raw = decode(kernel(1, 100, GEMM, graph=(5, 9)), OURS)[:11]
    records = to_decoded(raw)
    assert records.graph_id.tolist() == [] and records.kernels_table()["graph_id"].to_pylist() == [0]


def test_api_records_are_decoded_apart_from_activity(decode: Decode):
    raw = decode(api(1, start=10) + api(2, driver=True, start=20) + api(3, start=30), OURS)
    records = to_decoded(raw)
    assert records.records == 3 and len(records.correlation_id) == 0 and len(records.ext_id) == 0
    assert records.api_correlation_id.tolist() == [1, 2, 3] and records.api_kind.tolist() == [0, 1, 0]
    assert records.api_start_ns.tolist() == [10, 20, 30] and records.api_end_ns.tolist() == [40, 50, 60]
    assert raw[10]["undecodable"] == 0


def test_an_api_record_with_a_full_thread_id_and_timestamp(decode: Decode):
    # CUPTI's fields are unsigned: a 32-bit thread id and a timestamp above 2**32 keep their value
    records = to_decoded(decode(api(7, start=2**40 + 5, thread=2**32 - 1), OURS))
    assert records.api_thread.tolist() == [2**32 - 1] and records.api_start_ns.tolist() == [2**40 + 5]


def test_empty_buffer(decode: Decode):
    records = to_decoded(decode(b"", OURS))
    assert records.records == 0 and records.names == [] and records.correlation_id.shape == (0,)


def test_a_repeated_kernel_keeps_one_name(decode: Decode):
    buffer = b"".join(kernel(i, 1_000 + 100 * i, GEMM if i % 2 else RELU) for i in range(1_000))
    raw = decode(buffer, OURS)
    records = to_decoded(raw)
    assert records.names == ["elementwise_relu", GEMM.value.decode()]  # i = 0 is even: relu first
    assert records.name_index.tolist() == [i % 2 for i in range(1_000)]
    assert records.start_ns[-1] == 1_000 + 100 * 999


def test_one_text_at_two_addresses_is_one_name(decode: Decode):
    raw = decode(kernel(1, 10, GEMM) + kernel(2, 20, RELU) + kernel(3, 30, GEMM_AGAIN), OURS)
    assert raw[7] == [GEMM.value.decode(), "elementwise_relu", GEMM.value.decode()]  # interned by address
    records = to_decoded(raw)
    assert records.names == [GEMM.value.decode(), "elementwise_relu"]
    assert records.name_index.tolist() == [0, 1, 0]


def test_missing_and_broken_names(decode: Decode):
    broken = ctypes.create_string_buffer(b"k\xff")
    records = to_decoded(decode(kernel(1, 10, None) + kernel(2, 20, broken), OURS))
    assert records.names == ["", "k\ufffd"]  # NULL name: "" as cupti-python gives; bad UTF-8 replaced


def test_copy_and_set_names_come_from_their_codes(decode: Decode):
    buffer = memcpy(1, 10, copy=2, src=3, dst=1) + memcpy(2, 20, copy=99) + memset(3, 30, memory=2) + memcpy(4, 40)
    records = to_decoded(decode(buffer, OURS))
    assert records.names == [
        "Memcpy DtoH (Device -> Pageable)",
        "Memcpy Unknown (Pinned -> Device)",  # copy kind 99 is no CUpti_ActivityMemcpyKind
        "Memset (Pinned)",
        "Memcpy HtoD (Pinned -> Device)",
    ]


def test_an_unknown_kind_ends_the_walk_and_is_counted(decode: Decode):
    marker = _record(KERNEL_DTYPE, int(KINDS.MARKER))  # a kind we never enable
    raw = decode(kernel(1, 10, GEMM) + marker + kernel(2, 20, RELU), OURS)
    assert raw[10]["undecodable"] == 1 and raw[10]["records"] == 1
    assert to_decoded(raw).correlation_id.tolist() == [1]


def test_a_cut_record_is_counted(decode: Decode):
    raw = decode(kernel(1, 10, GEMM) + kernel(2, 20, RELU)[:100], OURS)
    assert raw[10]["undecodable"] == 1 and to_decoded(raw).correlation_id.tolist() == [1]
    assert decode(kernel(1, 10, GEMM) + b"\0\0", OURS)[10]["undecodable"] == 1  # under 4 bytes left


def test_record_sizes_replay_a_newer_layout(decode: Decode):
    # CUPTI 13.5 appends fields: a kernel record is 248 bytes there, the fields we read stay put
    newer = b"".join(kernel(i, 100 * i, GEMM) + bytes(248 - DTYPES["kernel"].itemsize) for i in range(3)) + link(1, 7)
    records = to_decoded(decode(newer, OURS, {int(KINDS.CONCURRENT_KERNEL): 248}))
    assert records.start_ns.tolist() == [0, 100, 200] and records.ext_id.tolist() == [7]
    assert decode(newer, OURS)[10]["undecodable"] == 1  # with 13.0 sizes the walk lands mid-record


def test_the_layouts_differ_only_in_the_kernel_record_size():
    sizes = {major: native.record_layouts(major) for major in MAJORS}
    kernels = (int(KINDS.KERNEL), int(KINDS.CONCURRENT_KERNEL))
    assert [sizes[12][k].size for k in kernels] == [208, 208] and [sizes[13][k].size for k in kernels] == [216, 216]
    for kind in sizes[12]:  # the fields read sit at the same offsets; the other records keep their size
        assert sizes[12][kind].fields == sizes[13][kind].fields, kind
        assert kind in kernels or sizes[12][kind].size == sizes[13][kind].size, kind


def test_explicit_layout_tables_match_the_installed_cupti_python():
    # the tables name CUPTI's kind codes and the dtype fields of the cupti-python of that major
    assert {key: native.KINDS[key] for key in native.KINDS} == {
        "kernel": int(KINDS.KERNEL), "concurrent_kernel": int(KINDS.CONCURRENT_KERNEL), "memcpy": int(KINDS.MEMCPY),
        "memset": int(KINDS.MEMSET), "correlation": int(KINDS.EXTERNAL_CORRELATION), "runtime": int(KINDS.RUNTIME),
        "driver": int(KINDS.DRIVER),
    }  # fmt: skip
    assert native.record_layouts() == native.record_layouts(CUPTI_PYTHON_MAJOR)
    for record, dtype in {"kernel": KERNEL_DTYPE, "memcpy": MEMCPY_DTYPE, "memset": MEMSET_DTYPE,
                          "correlation": LINK_DTYPE, "api": API_DTYPE}.items():  # fmt: skip
        explicit = native.record_dtype(record, CUPTI_PYTHON_MAJOR)
        assert explicit.itemsize == dtype.itemsize, record
        assert {name: explicit.fields[name][:2] for name in explicit.names} == {
            name: dtype.fields[name][:2] for name in explicit.names
        }, record


@needs_native
@pytest.mark.parametrize("major", MAJORS)
def test_compiled_layouts_match_the_explicit_tables(major: int):
    # the headers the extension was built with (12.6+ or 13.x) place every field read where the tables do
    offsets = cupti_native.record_offsets()
    assert {record: set(fields) for record, fields in offsets.items()} == {
        record: set(fields) for record, fields in native.FIELD_LAYOUTS.items()
    }
    assert {r: {f: o for f, (o, _) in fields.items()} for r, fields in native.FIELD_LAYOUTS.items()} == offsets
    explicit = {kind: layout.size for kind, layout in native.record_layouts(major).items()}
    assert cupti_native.record_sizes(major) == explicit
    assert cupti_native.record_sizes() == cupti_native.record_sizes(cupti_native.cupti_major())
    with pytest.raises(ValueError, match="no record layout for CUPTI 14"):
        cupti_native.record_sizes(14)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("major", MAJORS)
def test_a_buffer_of_one_layout_is_refused_in_the_other(backend: str, major: int, monkeypatch: pytest.MonkeyPatch):
    function = cupti_native.decode_buffer if backend == "native" else decode_buffer_py
    for record in DTYPES:
        monkeypatch.setitem(DTYPES, record, native.record_dtype(record, major))
    buffer = kernel(1, 10, GEMM) + kernel(2, 20, RELU) + link(2, 7)
    right = to_decoded(function(buffer, OURS, cupti_major=major))
    assert right.correlation_id.tolist() == [1, 2] and right.ext_id.tolist() == [7]
    other = {12: 13, 13: 12}[major]  # 8 bytes off per kernel: the walk lands mid-record
    wrong = function(buffer, OURS, cupti_major=other)
    assert wrong[10]["undecodable"] == 1 and to_decoded(wrong).ext_id.tolist() == []
    with pytest.raises(ValueError, match="no record layout for CUPTI 11"):
        function(buffer, OURS, cupti_major=11)


def test_cupti_dtype_finds_both_naming_schemes():
    marker = np.dtype([("kind", "<i4")])
    newer, older = np.dtype([("kind", "<i4"), ("x", "<u8")]), np.dtype([("kind", "<i4"), ("y", "<u4")])
    cupti13 = types.SimpleNamespace(
        activity_kernel9_dtype=older, activity_kernel10_dtype=newer, activity_cdp_kernel_dtype=marker,
        activity_api_dtype=marker,
    )  # fmt: skip
    cupti12 = types.SimpleNamespace(
        c_upti_activity_kernel8_dtype=newer, c_upti_activity_kernel9_dtype=older,
        c_upti_activity_memcpy_pto_p4_dtype=marker, c_upti_activity_api_dtype=marker,
    )  # fmt: skip
    assert native.cupti_dtype(cupti13, "kernel") is newer and native.cupti_dtype(cupti12, "kernel") is older
    assert native.cupti_dtype(cupti13, "api") is marker and native.cupti_dtype(cupti12, "api") is marker
    with pytest.raises(AttributeError, match="publishes no activity_memset"):
        native.cupti_dtype(cupti12, "memset")


def test_record_sizes_are_validated(decode: Decode):
    with pytest.raises(ValueError, match="record size 100 for kind 10 must be 0 or between 160"):
        decode(b"", OURS, {int(KINDS.CONCURRENT_KERNEL): 100})  # the graph id (uint32) ends at 156 + 4 = 160
    with pytest.raises(ValueError, match="outside 0..127"):
        decode(b"", OURS, {200: 8})
    with pytest.raises(ValueError, match="record size 32 for kind 5 must be 0 or between 36"):
        decode(b"", OURS, {int(KINDS.RUNTIME): 32})  # the correlation id of an API record ends at 32 + 4 = 36
    with pytest.raises(TypeError, match="record_sizes"):
        decode(b"", OURS, [(10, 216)])
    assert decode(kernel(1, 10, GEMM), OURS, {int(KINDS.CONCURRENT_KERNEL): 0})[10]["undecodable"] == 1


@needs_native
def test_misaligned_input_is_copied_before_reading():
    data = bytearray(b"\0" + one_pass())
    assert cupti_native.decode_buffer(memoryview(data)[1:], OURS) == cupti_native.decode_buffer(one_pass(), OURS)


def random_pass(seed: int, count: int = 400) -> bytes:
    """A random mix of every record kind, including other clients' links."""
    rng = random.Random(seed)
    names = [GEMM, RELU, GEMM_AGAIN, None]
    def graph() -> tuple[int, int]:  # half outside graphs; node ids are uint64
        return (0, 0) if rng.random() < 0.5 else (rng.randrange(2**32), rng.randrange(2**64))

    makers = [
        lambda i: kernel(i, rng.randrange(2**40), rng.choice(names), rng.randrange(8), rng.randrange(2**32), graph()),
        lambda i: memcpy(i, rng.randrange(2**40), rng.randrange(12), rng.randrange(9), rng.randrange(9), graph()),
        lambda i: memset(i, rng.randrange(2**40), rng.randrange(9), graph()),
        lambda i: link(i, rng.randrange(2**62), rng.choice([OURS, OTHER])),
        lambda i: api(i, rng.random() < 0.5, rng.randrange(2**40), rng.randrange(1, 2**32), rng.randrange(2**32)),
    ]
    return b"".join(rng.choice(makers)(rng.randrange(2**32)) for _ in range(count))


@needs_native
@pytest.mark.parametrize("seed", range(5))
def test_twins_agree_on_random_buffers(seed: int):
    buffer = random_pass(seed)
    assert cupti_native.decode_buffer(buffer, OURS) == decode_buffer_py(buffer, OURS)


def as_cupti_python_objects(buffer: bytes) -> list[types.SimpleNamespace]:
    """The attributes PythonRecordSink reads, as cupti-python's activity objects carry them."""
    layouts = native.record_layouts(LAYOUT["major"])
    objects, offset = [], 0
    while offset < len(buffer):
        layout = layouts[int.from_bytes(buffer[offset : offset + 4], "little")]
        row = np.frombuffer(buffer, DTYPES.get(layout.role, DTYPES["api"]), count=1, offset=offset)[0]
        fields = {name: int(row[name]) for name in row.dtype.names if row[name].shape == () and name != "cache_config"}
        if layout.role == "kernel":
            fields["name"] = ctypes.string_at(fields["name"]).decode() if fields["name"] else ""
        objects.append(types.SimpleNamespace(**fields))
        offset += layout.size
    return objects


@pytest.mark.parametrize("seed", range(3))
def test_python_sink_decodes_the_same_records_identically(decode: Decode, seed: int):
    buffer = one_pass() + random_pass(seed)
    sink = PythonRecordSink(types.SimpleNamespace(ActivityKind=KINDS), OURS)
    sink._buffer_completed(as_cupti_python_objects(buffer))
    expected, actual = sink.take(), to_decoded(decode(buffer, OURS))
    for field in expected.__dataclass_fields__:
        want, got = getattr(expected, field), getattr(actual, field)
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and np.array_equal(got, want), field
        else:
            assert got == want, field
    assert expected.kernels_table().equals(actual.kernels_table())


# -- the live collector: the real CUPTI callbacks, fed by hand ------------------------------------------


@pytest.fixture
def live():
    """The extension's live collector, reset (sized walk, nothing registered with CUPTI)."""
    if cupti_native is None:
        pytest.skip(NATIVE_MISSING)
    cupti_native._reset(OURS)
    yield cupti_native
    cupti_native._reset(OURS)


def test_callbacks_collect_in_delivery_order_until_take(live: types.ModuleType):
    first, second = one_pass(), kernel(7, 2_000, GEMM) + link(7, 104)
    live._simulate_delivery(first)
    live._simulate_delivery(second)
    assert live.take() == decode_buffer_py(first + second, OURS)
    assert to_decoded(live.take()).records == 0  # take() starts the columns afresh
    stats = live.stats()
    assert stats["buffers_requested"] == stats["buffers_completed"] == 2
    assert stats["outstanding_buffers"] == stats["foreign_buffers"] == 0 and stats["walk"] == "sized"


def test_pooled_buffers_are_handed_to_cupti_zeroed_and_pooled_again(live: types.ModuleType):
    try:
        assert live.prepare_buffers(2) == 2
        assert live._pool_is_zeroed()
        first, second = random_pass(0, count=500), one_pass()
        live._simulate_delivery(first)  # CUPTI writes into a pooled buffer
        live._simulate_delivery(second)
        stats = live.stats()
        assert stats["pool_hits"] == 2 and stats["pool_misses"] == 0
        # each came back written and was zeroed again before it was pooled: CUPTI is told they come zeroed
        assert stats["pooled_buffers"] == 2 and live._pool_is_zeroed()
        assert live.take() == decode_buffer_py(first + second, OURS)
        assert live.prepare_buffers(0) == 0  # released
        live._simulate_delivery(one_pass())  # a fresh mapping, zero as mapped; not pooled again
        stats = live.stats()
        assert stats["pool_misses"] == 1 and stats["pooled_buffers"] == 0
        with pytest.raises(ValueError, match="count must be 0 to 8"):
            live.prepare_buffers(9)
    finally:
        live.prepare_buffers(0)


def test_cupti_zeroes_buffers_unless_told_otherwise(live: types.ModuleType):
    try:
        taken = live.buffers_zeroed(True)
        assert live.stats()["buffers_zeroed"] is taken  # False where no libcupti could take the setting
    finally:
        assert isinstance(live.buffers_zeroed(False), bool)
    assert live.stats()["buffers_zeroed"] is False


def test_a_foreign_buffer_is_decoded_and_left_to_its_owner(live: types.ModuleType):
    live._simulate_delivery(one_pass(), foreign=True)
    assert to_decoded(live.take()).correlation_id.tolist() == [1, 2, 3, 4, 5, 6]
    assert live.stats()["foreign_buffers"] == 1


def test_native_sink_take_wraps_the_live_columns(live: types.ModuleType):
    try:
        sink = NativeRecordSink(OURS)
    except OSError as error:
        pytest.skip(f"no libcupti can be loaded here: {error}")
    assert sink.name == "native" and sink.library == cupti_native.library()
    assert os.path.basename(sink.library) == f"libcupti.so.{cupti_native.cupti_major()}"
    live._simulate_delivery(one_pass())
    records = sink.take()
    assert records.names == to_decoded(decode_buffer_py(one_pass(), OURS)).names
    assert sink.counters == {"records": 15, "undecodable": 0, "lost": 0, "layout_mismatches": 0}


def test_native_sink_warns_about_an_unwalkable_buffer(live: types.ModuleType):
    try:
        sink = NativeRecordSink(OURS)
    except OSError as error:
        pytest.skip(f"no libcupti can be loaded here: {error}")
    live._simulate_delivery(kernel(1, 10, GEMM) + _record(KERNEL_DTYPE, int(KINDS.MARKER)))
    with pytest.warns(RuntimeWarning, match="could not walk 1 buffer"):
        assert sink.take().correlation_id.tolist() == [1]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_decoding_many_buffers_does_not_grow_memory(live: types.ModuleType):
    buffer = random_pass(0, count=2_000)  # about 2_000 * 96 bytes = 190 kB per buffer

    def cycle(times: int) -> None:
        for _ in range(times):
            live.decode_buffer(buffer, OURS)
            live._simulate_delivery(buffer)
            live.take()

    cycle(50)  # warm the allocator
    gc.collect()
    before = _rss_bytes()
    cycle(500)  # 500 * 2 decodes of 190 kB: a leak of one buffer per cycle would show as 95 MB
    gc.collect()
    assert _rss_bytes() - before < 16 * 2**20
