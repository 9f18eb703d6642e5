"""Compiled CUPTI activity decoder (``native_shims/cupti_decoder.c``); see ``collection/native.py``."""

import sys

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

# A raw decode: activity columns (little-endian bytes: int64 correlation_id, start_ns, end_ns,
# device, stream; int8 kind_code; int32 name_index into the name table), the name table (a kernel
# name, ``(1, copy_kind, src_kind, dst_kind)`` for a copy, ``(2, memory_kind)`` for a set), the
# correlation columns (int64 ext_correlation_id, ext_id), counters ("records", "undecodable",
# "lost", "layout_mismatches"), then the runtime / driver API columns (int64 api_correlation_id;
# int8 api_kind, 0 runtime / 1 driver; int32 api_cbid; int64 api_start_ns, api_end_ns, api_thread),
# then the activity rows' int64 graph_id and graph_node_id (0 outside CUDA graphs).
RawRecords = tuple[
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    list[str | tuple[int, ...]],
    bytes,
    bytes,
    dict[str, int],
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
]
# Graph-node rows of the graph observer: int8 event (0 created, 1 cloned), int64 graph_id, node_id,
# external_id (-1: none), original_graph_id, original_node_id, int32 node_type, and counters
# ("lost", "id_errors").
GraphRows = tuple[bytes, bytes, bytes, bytes, bytes, bytes, bytes, dict[str, int]]

BUFFER_BYTES: int
CUPTI_API_VERSION: int  # of the headers built with: 24..28 for CUDA 12.6+, 130000 and up for 13.x
CUPTI_HEADER_MAJOR: int  # 12 or 13

def load(path: str | None = None) -> str:
    """Open the libcupti at ``path`` (a file or soname, from ``collection/libcupti.py``), check that its
    CUPTI version (12.6+ or 13.x) has a record layout here, resolve its functions; return its file.

    Once one is loaded, later calls return it and ignore ``path``; OSError where it cannot be used."""

def library() -> str | None:
    """The file of the loaded libcupti, or None before ``load()``."""

def cupti_version() -> int | None:
    """The loaded libcupti's CUPTI API version (``cuptiGetVersion``), or None before ``load()``."""

def cupti_major() -> int:
    """The CUPTI major whose record layout decodes by default: the loaded libcupti's, else the headers'."""

def record_offsets() -> dict[str, dict[str, int]]:
    """Offsets of the fields read, by record ("kernel", "memcpy", "memset", "correlation", "api"), in the headers."""

def register(external_kind: int, record_sizes: dict[int, int] | None = None) -> None:
    """Register this module's CUPTI buffer callbacks and forget older records (``load()`` first)."""

def take() -> RawRecords:
    """Every record delivered since ``register()``, as raw columns; the columns start empty again."""

def decode_buffer(
    buffer: Buffer, external_kind: int, record_sizes: dict[int, int] | None = None, cupti_major: int | None = None
) -> RawRecords:
    """Decode one activity buffer with the sized walk (replay; no CUPTI needed) in a CUPTI major's layout
    (12 or 13; default ``cupti_major()``), its sizes updated from ``record_sizes``."""

def record_sizes(cupti_major: int | None = None) -> dict[int, int]:
    """Record sizes in bytes by activity kind of a CUPTI major's layout (12: Kernel9, 13: Kernel10; default
    ``cupti_major()``); ValueError for another major."""

def stats() -> dict[str, int | str]:
    """Buffer counters of the live collector since ``register()`` and the walk it uses."""

def prepare_buffers(count: int) -> int:
    """Keep ``count`` (0 to 8) zeroed, faulted-in activity buffers ready; 0 releases them.

    Returns how many are ready."""

def _pool_is_zeroed() -> bool:
    """Test hook: whether every pooled buffer is all zero bytes."""

def buffers_zeroed(zeroed: bool) -> bool:
    """Tell CUPTI the buffers handed to it come zeroed (True) or that it zeroes them (False, its default)."""

def _simulate_delivery(buffer: Buffer, foreign: bool = False) -> None:
    """Test hook: pass one buffer through the real buffer callbacks, as CUPTI would."""

def _reset(external_kind: int, record_sizes: dict[int, int] | None = None, cupti_major: int | None = None) -> None:
    """Test hook: reset the live collector (sized walk) without registering with CUPTI."""

def graph_observer_start(external_kind: int) -> None:
    """Subscribe to CUPTI's graph-node created / cloned resource callbacks; RuntimeError with CUPTI's error."""

def graph_observer_stop() -> bool:
    """Unsubscribe the graph observer; safe to call when it is not running."""

def graph_observer_take() -> GraphRows:
    """Graph-node rows recorded since start (or the last take); they start empty again."""

def _simulate_graph_node(
    event: int,
    graph_id: int,
    node_id: int,
    external_id: int = -1,
    original_graph_id: int = 0,
    original_node_id: int = 0,
    node_type: int = 0,
) -> None:
    """Test hook: append one graph-node row, as the resource callback would."""

def callbacks_unavailable() -> str | None:
    """Why CUPTI's callbacks cannot be subscribed to (another subscriber: CUPTI error 39), or None."""

def correlation_functions() -> tuple[int, int]:
    """``(push, pop)``: addresses of this module's per-thread id stack, with CUPTI's push / pop signatures."""

def correlation_push(kind: int, external_id: int) -> None:
    """Push ``external_id`` on this thread's id stack (one stack serves every kind)."""

def correlation_pop(kind: int) -> int | None:
    """Pop this thread's id stack; the id, or None where it was empty."""

def correlation_reset() -> None:
    """Make every thread's stack read as empty."""

def _correlation_stack() -> list[int]:
    """Test hook: this thread's stack, bottom first."""

def launch_callbacks_start(runtime_cbids: list[int], driver_cbids: list[int], launch_rows: bool = True) -> None:
    """Enable the launch callbacks on these callback ids (``load()`` first); RuntimeError with CUPTI's error."""

def launch_callbacks_stop() -> bool:
    """Disable the launch callbacks; safe to call when they are off."""

def _simulate_launch(api: int, cbid: int, correlation_id: int, inner_driver_cbid: int = -1) -> None:
    """Test hook: one launch through the launch callback on this thread (entry, an inner driver call, exit)."""

def _launch_rows(rows: bool, runtime_cbids: list[int] | None = None, driver_cbids: list[int] | None = None) -> None:
    """Test hook: record launch rows (True) or only links, for these callback ids, without CUPTI."""
