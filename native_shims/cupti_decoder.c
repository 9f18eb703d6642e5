/*
 * aitune_dispatch.collection._cupti_native: CUPTI activity buffers decoded straight into column arrays.
 *
 * The extension registers its own CUPTI buffer callbacks. bufferCompleted runs on a CUPTI thread:
 * it walks the records, appends kernel / memcpy / memset rows, external-correlation links and
 * runtime / driver API rows (the launch / copy / set calls) to growable C arrays under a mutex,
 * gives the buffer back and returns. No Python object and no GIL there.
 * take() hands the columns to Python as bytes (numpy wraps them without a per-record loop).
 *
 * Buffers are anonymous mmaps, so a fresh one is already zero. By default CUPTI zeroes every buffer
 * it is handed, inside bufferRequested, on the thread whose launch needed it: the first kernel of a
 * collection paid for zeroing (and faulting in) 8 MiB. prepare_buffers() fills a small pool of
 * zeroed, faulted-in buffers before collection starts, buffers_zeroed() tells CUPTI
 * (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER) that ours need no zeroing, and a completed buffer
 * is zeroed again on CUPTI's thread and goes back to the pool (beyond POOL_MAX it is unmapped).
 * A buffer requested when the pool is empty is a fresh mmap, zero too: the attribute always holds.
 *
 * libcupti is never linked: load() opens the path or soname Python hands it (collection/libcupti.py
 * decides which: the copy already in the process, else the wheel of torch's CUDA major) and resolves
 * its functions there, so importing this module works on a machine without a GPU. cuptiFinalize is
 * never called.
 *
 * Record layouts: the decoder builds against CUPTI 12.6+ or 13.x headers and reads the kernel record
 * through CUpti_ActivityKernel9 (12.x) or CUpti_ActivityKernel10 (13.x), then CUpti_ActivityMemcpy6,
 * CUpti_ActivityMemset4, CUpti_ActivityExternalCorrelation and CUpti_ActivityAPI. Every field read
 * sits at the same offset in Kernel9 and Kernel10 (asserted below against the explicit offsets
 * KERNEL_START..KERNEL_GRAPH); only the record size differs (208 against 216 bytes), so the sizes come
 * from the CUPTI major of the loaded libcupti (its soname; load()), not from the headers: a decoder built on
 * 13.x headers is right on CUPTI 12 and the other way round. Live buffers are walked with
 * cuptiActivityGetNextRecord (always right for the running libcupti); decode_buffer() replays
 * buffers with our own walk, sized per kind for a CUPTI major, so tests run without a driver.
 *
 * Kernel, copy and set rows carry the CUDA graph they were replayed from (graphId, graphNodeId; 0
 * outside graphs). The graph observer, the per-thread id stack of launch correlation and the launch
 * callbacks live in cupti_callbacks.c; take() appends the launch callbacks' rows (links and API
 * calls) to the activity columns, so both correlation paths hand Python the same raw tuple, and the
 * module gets their Python functions (callback_methods) when it is created.
 */
#include "cupti_shared.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_version.h>

#define BUFFER_BYTES ((size_t)8 * 1024 * 1024)
#define POOL_MAX 8 /* zeroed buffers kept ready between collections, at most */
#define RECORD_ALIGN ((size_t)8)
#define KIND_SLOTS 128
#define MAX_RECORD_BYTES ((size_t)1 << 16)

/* The kernel record of the headers at hand: Kernel9 up to CUPTI 12.x, Kernel10 from 13.0 (13.x keeps
 * it in cupti_activity_deprecated.h). CUPTI_API_VERSION: 24 for CUDA 12.6, ..., 28; 130000 and up for 13.x. */
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 KernelRecord;
#define HEADER_MAJOR 13
#elif CUPTI_API_VERSION >= 24
typedef CUpti_ActivityKernel9 KernelRecord;
#define HEADER_MAJOR 12
#else
#error "the native CUPTI decoder needs CUPTI 12.6+ or 13.x headers (CUPTI_API_VERSION 24 or later)"
#endif

/* Layouts by CUPTI major: only the kernel record's size differs between 12 (Kernel9) and 13
 * (Kernel10). The offsets of every kernel field read, one table for both (cf. collection/native.py
 * FIELD_LAYOUTS, which the tests compare with record_offsets() and cupti-python's dtypes). */
#define MIN_MAJOR 12
#define MAX_MAJOR 13
#define MIN_VERSION_12 24 /* CUPTI_API_VERSION of CUDA 12.6 */
#define KERNEL_BYTES_12 208 /* sizeof(CUpti_ActivityKernel9) */
#define KERNEL_BYTES_13 216 /* sizeof(CUpti_ActivityKernel10) */
static const size_t KERNEL_BYTES[MAX_MAJOR + 1] = {[12] = KERNEL_BYTES_12, [13] = KERNEL_BYTES_13};
enum {
    KERNEL_START = 16, KERNEL_END = 24, KERNEL_DEVICE = 40, KERNEL_STREAM = 48, KERNEL_CORRELATION = 92,
    KERNEL_NAME = 104, KERNEL_GRAPH_NODE = 144, KERNEL_GRAPH = 156,
};
_Static_assert(offsetof(KernelRecord, start) == KERNEL_START, "kernel start moved");
_Static_assert(offsetof(KernelRecord, end) == KERNEL_END, "kernel end moved");
_Static_assert(offsetof(KernelRecord, deviceId) == KERNEL_DEVICE, "kernel deviceId moved");
_Static_assert(offsetof(KernelRecord, streamId) == KERNEL_STREAM, "kernel streamId moved");
_Static_assert(offsetof(KernelRecord, correlationId) == KERNEL_CORRELATION, "kernel correlationId moved");
_Static_assert(offsetof(KernelRecord, name) == KERNEL_NAME, "kernel name moved");
_Static_assert(offsetof(KernelRecord, graphNodeId) == KERNEL_GRAPH_NODE, "kernel graphNodeId moved");
_Static_assert(offsetof(KernelRecord, graphId) == KERNEL_GRAPH, "kernel graphId moved");
_Static_assert(sizeof(KernelRecord) == (HEADER_MAJOR == 12 ? KERNEL_BYTES_12 : KERNEL_BYTES_13), "kernel record size");
/* the same in 12.6+ and 13.x */
_Static_assert(sizeof(CUpti_ActivityMemcpy6) == 96 && sizeof(CUpti_ActivityMemset4) == 88, "copy / set records");
_Static_assert(sizeof(CUpti_ActivityExternalCorrelation) == 24 && sizeof(CUpti_ActivityAPI) == 40, "link / API");

/* records.KIND_KERNEL / KIND_MEMCPY / KIND_MEMSET */
enum { ROW_KERNEL = 0, ROW_MEMCPY = 1, ROW_MEMSET = 2 };

/* name keys: a kernel's name pointer, or a tag in the top byte with the codes of a copy / set */
#define TAG_SHIFT 56
#define TAG_MEMCPY ((uint64_t)1 << TAG_SHIFT)
#define TAG_MEMSET ((uint64_t)2 << TAG_SHIFT)
#define KEY_NO_NAME ((uint64_t)3 << TAG_SHIFT)
#define TAG_MASK ((uint64_t)0xff << TAG_SHIFT)

#define FIELD_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define MAX2(a, b) ((a) > (b) ? (a) : (b))

typedef __typeof__(&cuptiActivityRegisterCallbacks) RegisterFn;
typedef __typeof__(&cuptiActivityGetNextRecord) NextRecordFn;
typedef __typeof__(&cuptiActivitySetAttribute) SetAttributeFn;
typedef __typeof__(&cuptiGetVersion) VersionFn;

/* ---------------------------------------------------------------------------------------------- */
/* columns                                                                                        */

typedef struct {
    int64_t *correlation_id, *start_ns, *end_ns, *device, *stream, *graph_id, *graph_node_id;
    int8_t *kind_code;
    int32_t *name_index;
    size_t rows, row_cap;
    int64_t *ext_correlation_id, *ext_id;
    size_t links, link_cap;
    int64_t *api_correlation_id, *api_start_ns, *api_end_ns, *api_thread;
    int8_t *api_kind;
    int32_t *api_cbid;
    size_t calls, call_cap;
    uint64_t *slot_key; /* open addressing: name key -> name id; key 0 marks an empty slot */
    int32_t *slot_id;
    size_t slot_cap, slot_used;
    uint64_t *name_key; /* name id -> key, and the copied kernel name (NULL for copies / sets) */
    char **name_text;
    size_t names, name_cap;
    uint64_t last_key; /* one-entry cache: consecutive records often share a kernel */
    int32_t last_id;
    /* configuration, kept across resets */
    int32_t external_kind;
    size_t record_size[KIND_SLOTS];
    /* counters */
    uint64_t records, undecodable, lost, layout_mismatches;
} Collector;

/** Free every array of a collector and zero its data, keeping its configuration. */
static void collector_clear(Collector *c) {
    free(c->correlation_id); free(c->start_ns); free(c->end_ns); free(c->device); free(c->stream);
    free(c->graph_id); free(c->graph_node_id);
    free(c->kind_code); free(c->name_index);
    free(c->ext_correlation_id); free(c->ext_id);
    free(c->api_correlation_id); free(c->api_start_ns); free(c->api_end_ns); free(c->api_thread);
    free(c->api_kind); free(c->api_cbid);
    free(c->slot_key); free(c->slot_id);
    for (size_t i = 0; i < c->names; i++) free(c->name_text[i]);
    free(c->name_key); free(c->name_text);
    int32_t kind = c->external_kind;
    size_t sizes[KIND_SLOTS];
    memcpy(sizes, c->record_size, sizeof(sizes));
    memset(c, 0, sizeof(*c));
    c->external_kind = kind;
    memcpy(c->record_size, sizes, sizeof(sizes));
}

/** Grow one array to hold `cap` elements; 0 on failure (the old array stays valid). */
int grow(void **array, size_t element, size_t cap) {
    void *bigger = realloc(*array, element * cap);
    if (!bigger) return 0;
    *array = bigger;
    return 1;
}

static int reserve_row(Collector *c) {
    if (c->rows < c->row_cap) return 1;
    size_t cap = c->row_cap ? c->row_cap * 2 : 4096;
    int ok = grow((void **)&c->correlation_id, sizeof(int64_t), cap)
        && grow((void **)&c->start_ns, sizeof(int64_t), cap)
        && grow((void **)&c->end_ns, sizeof(int64_t), cap)
        && grow((void **)&c->device, sizeof(int64_t), cap)
        && grow((void **)&c->stream, sizeof(int64_t), cap)
        && grow((void **)&c->graph_id, sizeof(int64_t), cap)
        && grow((void **)&c->graph_node_id, sizeof(int64_t), cap)
        && grow((void **)&c->kind_code, sizeof(int8_t), cap)
        && grow((void **)&c->name_index, sizeof(int32_t), cap);
    if (ok) c->row_cap = cap;
    return ok;
}

static int reserve_link(Collector *c) {
    if (c->links < c->link_cap) return 1;
    size_t cap = c->link_cap ? c->link_cap * 2 : 4096;
    int ok = grow((void **)&c->ext_correlation_id, sizeof(int64_t), cap)
        && grow((void **)&c->ext_id, sizeof(int64_t), cap);
    if (ok) c->link_cap = cap;
    return ok;
}

static int reserve_call(Collector *c) {
    if (c->calls < c->call_cap) return 1;
    size_t cap = c->call_cap ? c->call_cap * 2 : 4096;
    int ok = grow((void **)&c->api_correlation_id, sizeof(int64_t), cap)
        && grow((void **)&c->api_kind, sizeof(int8_t), cap)
        && grow((void **)&c->api_cbid, sizeof(int32_t), cap)
        && grow((void **)&c->api_start_ns, sizeof(int64_t), cap)
        && grow((void **)&c->api_end_ns, sizeof(int64_t), cap)
        && grow((void **)&c->api_thread, sizeof(int64_t), cap);
    if (ok) c->call_cap = cap;
    return ok;
}

static int reserve_name(Collector *c) {
    if (c->names < c->name_cap) return 1;
    size_t cap = c->name_cap ? c->name_cap * 2 : 256;
    int ok = grow((void **)&c->name_key, sizeof(uint64_t), cap) && grow((void **)&c->name_text, sizeof(char *), cap);
    if (ok) c->name_cap = cap;
    return ok;
}

static size_t slot_of(uint64_t key, size_t mask) {
    key ^= key >> 33; key *= 0xff51afd7ed558ccdULL; key ^= key >> 33;
    return (size_t)key & mask;
}

/** Double the name hash table (or create it); 0 on failure. */
static int rehash(Collector *c) {
    size_t cap = c->slot_cap ? c->slot_cap * 2 : 1024;
    uint64_t *keys = calloc(cap, sizeof(uint64_t));
    int32_t *ids = calloc(cap, sizeof(int32_t));
    if (!keys || !ids) { free(keys); free(ids); return 0; }
    for (size_t i = 0; i < c->slot_cap; i++) {
        if (!c->slot_key[i]) continue;
        size_t j = slot_of(c->slot_key[i], cap - 1);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = c->slot_key[i];
        ids[j] = c->slot_id[i];
    }
    free(c->slot_key); free(c->slot_id);
    c->slot_key = keys; c->slot_id = ids; c->slot_cap = cap;
    return 1;
}

/** The name id of a key, added on first sight (kernel names are copied); -1 when out of memory. */
static int32_t intern(Collector *c, uint64_t key, const char *text) {
    if (c->names && key == c->last_key) return c->last_id;
    if ((c->slot_used + 1) * 2 > c->slot_cap && !rehash(c)) return -1;
    size_t mask = c->slot_cap - 1, i = slot_of(key, mask);
    for (; c->slot_key[i]; i = (i + 1) & mask) {
        if (c->slot_key[i] == key) {
            c->last_key = key;
            return c->last_id = c->slot_id[i];
        }
    }
    if (!reserve_name(c) || c->names >= INT32_MAX) return -1;
    char *copy = NULL;
    if (text && !(copy = strdup(text))) return -1;
    int32_t id = (int32_t)c->names++;
    c->name_key[id] = key;
    c->name_text[id] = copy;
    c->slot_key[i] = key;
    c->slot_id[i] = id;
    c->slot_used++;
    c->last_key = key;
    return c->last_id = id;
}

static int32_t intern_kernel(Collector *c, const char *name) {
    return name ? intern(c, (uint64_t)(uintptr_t)name, name) : intern(c, KEY_NO_NAME, NULL);
}

static void push_row(Collector *c, uint32_t correlation, uint64_t start, uint64_t end, uint32_t device,
                     uint32_t stream, int8_t kind, int32_t name, uint32_t graph, uint64_t graph_node) {
    if (name < 0 || !reserve_row(c)) { c->lost++; return; }
    size_t r = c->rows++;
    c->correlation_id[r] = correlation;
    c->start_ns[r] = (int64_t)start;
    c->end_ns[r] = (int64_t)end;
    c->device[r] = device;
    c->stream[r] = stream;
    c->graph_id[r] = graph;
    c->graph_node_id[r] = (int64_t)graph_node;
    c->kind_code[r] = kind;
    c->name_index[r] = name;
}

static void push_link(Collector *c, uint32_t correlation, uint64_t external_id) {
    if (!reserve_link(c)) { c->lost++; return; }
    c->ext_correlation_id[c->links] = correlation;
    c->ext_id[c->links] = (int64_t)external_id;
    c->links++;
}

/** Append one API call row: from an API activity record, or from the launch callbacks' rows. */
static void append_call(Collector *c, int64_t correlation, int8_t api, int32_t cbid, int64_t start, int64_t end,
                        int64_t thread) {
    if (!reserve_call(c)) { c->lost++; return; }
    size_t r = c->calls++;
    c->api_correlation_id[r] = correlation;
    c->api_kind[r] = api;
    c->api_cbid[r] = cbid;
    c->api_start_ns[r] = start;
    c->api_end_ns[r] = end;
    c->api_thread[r] = thread;
}

static void push_call(Collector *c, const CUpti_ActivityAPI *a, int8_t api) {
    append_call(c, a->correlationId, api, (int32_t)a->cbid, (int64_t)a->start, (int64_t)a->end, a->threadId);
}

/* ---------------------------------------------------------------------------------------------- */
/* records                                                                                        */

/** Append one record to the columns (kernels, copies, sets, our correlation kind, API calls); count all. */
static void decode_record(Collector *c, const CUpti_Activity *record) {
    c->records++;
    switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const KernelRecord *k = (const KernelRecord *)record;
        push_row(c, k->correlationId, k->start, k->end, k->deviceId, k->streamId, ROW_KERNEL,
                 intern_kernel(c, k->name), k->graphId, k->graphNodeId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)record;
        uint64_t key = TAG_MEMCPY | ((uint64_t)m->copyKind << 16) | ((uint64_t)m->srcKind << 8) | m->dstKind;
        push_row(c, m->correlationId, m->start, m->end, m->deviceId, m->streamId, ROW_MEMCPY, intern(c, key, NULL),
                 m->graphId, m->graphNodeId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)record;
        uint64_t key = TAG_MEMSET | (uint64_t)m->memoryKind;
        push_row(c, m->correlationId, m->start, m->end, m->deviceId, m->streamId, ROW_MEMSET, intern(c, key, NULL),
                 m->graphId, m->graphNodeId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *e = (const CUpti_ActivityExternalCorrelation *)record;
        if ((int32_t)e->externalKind == c->external_kind) push_link(c, e->correlationId, e->externalId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: /* only the launch / copy / set callback ids are enabled */
        push_call(c, (const CUpti_ActivityAPI *)record, API_RUNTIME);
        break;
    case CUPTI_ACTIVITY_KIND_DRIVER:
        push_call(c, (const CUpti_ActivityAPI *)record, API_DRIVER);
        break;
    default:
        break;
    }
}

static size_t aligned(size_t size) { return (size + RECORD_ALIGN - 1) & ~(RECORD_ALIGN - 1); }

static size_t size_of_kind(const Collector *c, uint32_t kind) { return kind < KIND_SLOTS ? c->record_size[kind] : 0; }

/** Walk a buffer with our own per-kind sizes; an unknown kind or a cut record ends the walk. */
static void walk_sized(Collector *c, const uint8_t *buffer, size_t valid) {
    size_t offset = 0;
    while (offset < valid) {
        if (valid - offset < sizeof(CUpti_Activity)) { c->undecodable++; return; }
        const CUpti_Activity *record = (const CUpti_Activity *)(buffer + offset);
        size_t size = size_of_kind(c, (uint32_t)record->kind);
        if (!size || size > valid - offset) { c->undecodable++; return; }
        decode_record(c, record);
        offset += aligned(size);
    }
}

/** Walk a live buffer with CUPTI's own iterator; count records whose spacing differs from our sizes. */
static void walk_cupti(Collector *c, NextRecordFn next, uint8_t *buffer, size_t valid) {
    CUpti_Activity *record = NULL, *previous = NULL;
    for (;;) {
        CUptiResult status = next(buffer, valid, &record);
        if (status == CUPTI_ERROR_MAX_LIMIT_REACHED) return;
        if (status != CUPTI_SUCCESS || !record) { c->undecodable++; return; }
        if (previous) {
            size_t expected = aligned(size_of_kind(c, (uint32_t)previous->kind));
            if (expected && (size_t)((uint8_t *)record - (uint8_t *)previous) != expected) c->layout_mismatches++;
        }
        decode_record(c, record);
        previous = record;
    }
}

/** The record sizes of one CUPTI major (MIN_MAJOR..MAX_MAJOR) by activity kind. */
static void default_record_sizes(size_t *sizes, int major) {
    memset(sizes, 0, sizeof(size_t) * KIND_SLOTS);
    sizes[CUPTI_ACTIVITY_KIND_KERNEL] = KERNEL_BYTES[major];
    sizes[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] = KERNEL_BYTES[major];
    sizes[CUPTI_ACTIVITY_KIND_MEMCPY] = sizeof(CUpti_ActivityMemcpy6);
    sizes[CUPTI_ACTIVITY_KIND_MEMSET] = sizeof(CUpti_ActivityMemset4);
    sizes[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION] = sizeof(CUpti_ActivityExternalCorrelation);
    sizes[CUPTI_ACTIVITY_KIND_RUNTIME] = sizeof(CUpti_ActivityAPI);
    sizes[CUPTI_ACTIVITY_KIND_DRIVER] = sizeof(CUpti_ActivityAPI);
}

/** Bytes of a record that decode_record reads: a record size below it is rejected. */
static size_t bytes_read(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return MAX2(MAX2(FIELD_END(KernelRecord, name), FIELD_END(KernelRecord, correlationId)),
                    MAX2(FIELD_END(KernelRecord, graphNodeId), FIELD_END(KernelRecord, graphId)));
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        return MAX2(MAX2(FIELD_END(CUpti_ActivityMemcpy6, correlationId), FIELD_END(CUpti_ActivityMemcpy6, streamId)),
                    MAX2(FIELD_END(CUpti_ActivityMemcpy6, graphNodeId), FIELD_END(CUpti_ActivityMemcpy6, graphId)));
    case CUPTI_ACTIVITY_KIND_MEMSET:
        return MAX2(MAX2(FIELD_END(CUpti_ActivityMemset4, memoryKind), FIELD_END(CUpti_ActivityMemset4, correlationId)),
                    MAX2(FIELD_END(CUpti_ActivityMemset4, graphNodeId), FIELD_END(CUpti_ActivityMemset4, graphId)));
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return MAX2(FIELD_END(CUpti_ActivityExternalCorrelation, correlationId),
                    FIELD_END(CUpti_ActivityExternalCorrelation, externalId));
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return MAX2(FIELD_END(CUpti_ActivityAPI, correlationId), FIELD_END(CUpti_ActivityAPI, threadId));
    default:
        return sizeof(CUpti_Activity);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* the live collector: CUPTI callbacks                                                            */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static Collector live;
static int live_walk_cupti;          /* walk live buffers with cuptiActivityGetNextRecord */
static void **outstanding;           /* buffers we handed to CUPTI and did not get back yet */
static size_t outstanding_count, outstanding_cap;
static uint64_t buffers_requested, buffers_completed, foreign_buffers;

static void *cupti_library;
static RegisterFn p_register;
static NextRecordFn p_next_record;
ResultStringFn p_result_string;
/* the callback functions cupti_callbacks.c calls: resolved with the others, optional (NULL: no graph
 * observer and no launch callbacks) */
SubscribeFn p_subscribe;
UnsubscribeFn p_unsubscribe;
EnableCallbackFn p_enable_callback;
GraphNodeIdFn p_graph_node_id;
GraphIdFn p_graph_id;
PushFn p_push;
PopFn p_pop;
TimestampFn p_timestamp;
static SetAttributeFn p_set_attribute; /* optional: without it CUPTI zeroes every buffer itself */

const char NO_DRIVER[] =
    "no CUDA driver (libcuda.so.1) can be loaded in this process, and CUPTI cannot run without one "
    "(libcupti 13.2 crashes when called without it): profile on a machine with an NVIDIA driver, "
    "or pass device='cpu'";

int cuda_driver_present(int may_load) {
    static int present;
    if (__atomic_load_n(&present, __ATOMIC_ACQUIRE)) return 1;
    /* the handle is never closed: the driver stays mapped for as long as CUPTI may call it */
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver && may_load) driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) return 0;
    __atomic_store_n(&present, 1, __ATOMIC_RELEASE);
    return 1;
}

/** Text of a CUPTI status, for error messages. */
const char *status_text(CUptiResult status) {
    const char *text = NULL;
    if (!p_result_string || !cuda_driver_present(0) || p_result_string(status, &text) != CUPTI_SUCCESS || !text) text = "no description";
    return text;
}

/* Buffers come from mmap, so a fresh one is zero. CUPTI zeroes each buffer it is handed, on the
 * launching thread, unless told they come zeroed (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER):
 * 8 MiB of page faults and memset inside the first launch of every collection. So prepare_buffers()
 * faults in a pool of zeroed buffers before a collection starts, buffers_zeroed(1) tells CUPTI, and
 * a completed buffer is zeroed again on CUPTI's thread and pooled. (caller holds live_lock for both) */
static void *pool[POOL_MAX];
static size_t pool_count, pool_target;
static int buffers_come_zeroed;
static uint64_t pool_hits, pool_misses;

static void *mapped_buffer(int populate) {
    void *memory = mmap(NULL, BUFFER_BYTES, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    return memory == MAP_FAILED ? NULL : memory;
}

/** Remember a buffer handed to CUPTI (caller holds live_lock); 0 when out of memory. */
static int track(void *buffer) {
    if (outstanding_count == outstanding_cap) {
        size_t cap = outstanding_cap ? outstanding_cap * 2 : 16;
        if (!grow((void **)&outstanding, sizeof(void *), cap)) return 0;
        outstanding_cap = cap;
    }
    outstanding[outstanding_count++] = buffer;
    return 1;
}

/** Forget a buffer CUPTI gave back (caller holds live_lock); 0 if it was not ours. */
static int untrack(void *buffer) {
    for (size_t i = 0; i < outstanding_count; i++) {
        if (outstanding[i] == buffer) {
            outstanding[i] = outstanding[--outstanding_count];
            return 1;
        }
    }
    return 0;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *memory = NULL;
    pthread_mutex_lock(&live_lock);
    if (pool_count) memory = pool[--pool_count], pool_hits++;
    else pool_misses++;
    pthread_mutex_unlock(&live_lock);
    if (!memory) memory = mapped_buffer(0); /* zero pages, faulted in as CUPTI writes */
    pthread_mutex_lock(&live_lock);
    if (memory && !track(memory)) { munmap(memory, BUFFER_BYTES); memory = NULL; }
    buffers_requested++;
    pthread_mutex_unlock(&live_lock);
    *buffer = memory; /* NULL: CUPTI drops records and counts them as dropped */
    *size = memory ? BUFFER_BYTES : 0;
    *max_records = 0;
}

/** A buffer of ours CUPTI is done with: zeroed and pooled (this thread is CUPTI's), else unmapped. */
static void recycle(void *buffer) {
    pthread_mutex_lock(&live_lock);
    int keep = pool_count < pool_target;
    pthread_mutex_unlock(&live_lock);
    if (keep) {
        memset(buffer, 0, BUFFER_BYTES);
        pthread_mutex_lock(&live_lock);
        keep = pool_count < pool_target;
        if (keep) pool[pool_count++] = buffer;
        pthread_mutex_unlock(&live_lock);
    }
    if (!keep) munmap(buffer, BUFFER_BYTES);
}

static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)context; (void)stream; (void)size;
    if (!buffer) return;
    pthread_mutex_lock(&live_lock);
    int ours = untrack(buffer);
    buffers_completed++;
    if (!ours) foreign_buffers++; /* requested under another client's callbacks: decoded, never freed */
    if (valid) {
        if (live_walk_cupti && p_next_record) walk_cupti(&live, p_next_record, buffer, valid);
        else walk_sized(&live, buffer, valid);
    }
    pthread_mutex_unlock(&live_lock);
    if (ours) recycle(buffer);
}

/** Fill the pool with ``count`` zeroed, faulted-in buffers (0 empties it); return how many it holds. */
static PyObject *py_prepare_buffers(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "n:prepare_buffers", &count)) return NULL;
    if (count < 0 || count > POOL_MAX) {
        PyErr_Format(PyExc_ValueError, "prepare_buffers: count must be 0 to %d, not %zd", POOL_MAX, count);
        return NULL;
    }
    void *spare[POOL_MAX];
    size_t spares = 0, held;
    pthread_mutex_lock(&live_lock);
    pool_target = (size_t)count;
    while (pool_count > pool_target) spare[spares++] = pool[--pool_count];
    held = pool_count;
    pthread_mutex_unlock(&live_lock);
    for (size_t i = 0; i < spares; i++) munmap(spare[i], BUFFER_BYTES);
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = held; i < (size_t)count; i++) {
        void *memory = mapped_buffer(1);
        if (!memory) break;
        pthread_mutex_lock(&live_lock);
        if (pool_count < pool_target) pool[pool_count++] = memory, memory = NULL;
        held = pool_count;
        pthread_mutex_unlock(&live_lock);
        if (memory) munmap(memory, BUFFER_BYTES);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(held);
}

/** Test hook: whether every pooled buffer is all zero bytes (what CUPTI is told it gets). */
static PyObject *py_pool_is_zeroed(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    int zero = 1;
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < pool_count && zero; i++) {
        const uint64_t *words = (const uint64_t *)pool[i];
        for (size_t w = 0; w < BUFFER_BYTES / sizeof(uint64_t); w++) {
            if (words[w]) { zero = 0; break; }
        }
    }
    pthread_mutex_unlock(&live_lock);
    return PyBool_FromLong(zero);
}

/** Tell CUPTI whether the buffers we hand it come zeroed (1), or that it must zero them (0, its
 * default, which other CUPTI clients rely on); True where CUPTI took the setting. */
static PyObject *py_buffers_zeroed(PyObject *self, PyObject *args) {
    (void)self;
    int flag;
    if (!PyArg_ParseTuple(args, "p:buffers_zeroed", &flag)) return NULL;
    if (!p_set_attribute || !cuda_driver_present(1)) Py_RETURN_FALSE;
    uint8_t value = flag ? 1 : 0;
    size_t value_size = sizeof(value);
    CUptiResult status = p_set_attribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &value_size, &value);
    pthread_mutex_lock(&live_lock);
    buffers_come_zeroed = status == CUPTI_SUCCESS && flag;
    pthread_mutex_unlock(&live_lock);
    if (status == CUPTI_SUCCESS) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* ---------------------------------------------------------------------------------------------- */
/* Python surface                                                                                 */

static void lock_live(void) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&live_lock);
    Py_END_ALLOW_THREADS
}

PyObject *column(const void *data, size_t count, size_t element) {
    return PyBytes_FromStringAndSize(count ? (const char *)data : NULL, (Py_ssize_t)(count * element));
}

/** One entry of the name table: a kernel name, or the codes of a copy / set. */
static PyObject *name_entry(const Collector *c, size_t id) {
    uint64_t key = c->name_key[id];
    switch (key & TAG_MASK) {
    case TAG_MEMCPY:
        return Py_BuildValue("(iiii)", ROW_MEMCPY, (int)((key >> 16) & 0xff), (int)((key >> 8) & 0xff), (int)(key & 0xff));
    case TAG_MEMSET:
        return Py_BuildValue("(ii)", ROW_MEMSET, (int)(key & 0xffff));
    case KEY_NO_NAME:
        return PyUnicode_FromStringAndSize("", 0);
    default: {
        const char *text = c->name_text[id];
        return PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
    }
    }
}

static PyObject *name_list(const Collector *c) {
    PyObject *names = PyList_New((Py_ssize_t)c->names);
    if (!names) return NULL;
    for (size_t i = 0; i < c->names; i++) {
        PyObject *entry = name_entry(c, i);
        if (!entry) { Py_DECREF(names); return NULL; }
        PyList_SET_ITEM(names, (Py_ssize_t)i, entry);
    }
    return names;
}

/** The raw-records tuple of a collector (see _cupti_native.pyi): the counters stay at index 10; the API
 * calls after them, then the rows' graph columns. */
static PyObject *raw_records(const Collector *c) {
    return Py_BuildValue(
        "(NNNNNNNNNN{sKsKsKsK}NNNNNNNN)",
        column(c->correlation_id, c->rows, sizeof(int64_t)), column(c->start_ns, c->rows, sizeof(int64_t)),
        column(c->end_ns, c->rows, sizeof(int64_t)), column(c->device, c->rows, sizeof(int64_t)),
        column(c->stream, c->rows, sizeof(int64_t)), column(c->kind_code, c->rows, sizeof(int8_t)),
        column(c->name_index, c->rows, sizeof(int32_t)), name_list(c),
        column(c->ext_correlation_id, c->links, sizeof(int64_t)), column(c->ext_id, c->links, sizeof(int64_t)),
        "records", (unsigned long long)c->records, "undecodable", (unsigned long long)c->undecodable,
        "lost", (unsigned long long)c->lost, "layout_mismatches", (unsigned long long)c->layout_mismatches,
        column(c->api_correlation_id, c->calls, sizeof(int64_t)), column(c->api_kind, c->calls, sizeof(int8_t)),
        column(c->api_cbid, c->calls, sizeof(int32_t)), column(c->api_start_ns, c->calls, sizeof(int64_t)),
        column(c->api_end_ns, c->calls, sizeof(int64_t)), column(c->api_thread, c->calls, sizeof(int64_t)),
        column(c->graph_id, c->rows, sizeof(int64_t)), column(c->graph_node_id, c->rows, sizeof(int64_t)));
}

/* The CUPTI the records come from, once load() opened it: its major (0 before), which picks the record
 * layout of the live collector and the default one of decode_buffer(), and its API version where it
 * was asked (cuptiGetVersion; 0 where not). */
static int loaded_major;
static uint32_t running_version;

/** The CUPTI major of an API version (24..9999: 12.x, 130000..: 13.x and on); 0 where it is none of them. */
static int major_of(uint32_t version) {
    if (version >= 130000) return (int)(version / 10000);
    return version >= 19 ? 12 : 0; /* 19: CUDA 12.0 (the versions before 130000 count 12.x releases) */
}

/** The major in a loaded library's DT_SONAME (libcupti.so.<major>), or -1 where it has none. Read from
 * the ELF dynamic section, not asked of CUPTI: without a driver cuptiGetVersion fails (13.5) or
 * crashes (13.2), while the soname is always there. */
static int soname_major(void *handle) {
    struct link_map *map = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_ld) return -1;
    const char *strtab = NULL;
    long soname = -1;
    for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB) {
            ElfW(Addr) at = d->d_un.d_ptr;
            strtab = (const char *)(at < map->l_addr ? at + map->l_addr : at); /* unrelocated on some arches */
        } else if (d->d_tag == DT_SONAME) {
            soname = (long)d->d_un.d_val;
        }
    }
    if (!strtab || soname < 0) return -1;
    const char *suffix = strstr(strtab + soname, ".so.");
    if (!suffix || suffix[4] < '0' || suffix[4] > '9') return -1;
    return atoi(suffix + 4);
}

/** The layout used where none is asked for: the loaded libcupti's major, else the headers'. */
static int running_major(void) { return loaded_major ? loaded_major : HEADER_MAJOR; }

/** A CUPTI major from a Python int or None (the running one); -1 with a ValueError where no layout exists. */
static int parse_major(PyObject *value) {
    if (!value || value == Py_None) return running_major();
    long major = PyLong_AsLong(value);
    if (major == -1 && PyErr_Occurred()) return -1;
    if (major < MIN_MAJOR || major > MAX_MAJOR) {
        PyErr_Format(PyExc_ValueError, "cupti_major: no record layout for CUPTI %ld; the decoder knows %d to %d",
                     major, MIN_MAJOR, MAX_MAJOR);
        return -1;
    }
    return (int)major;
}

/** Record sizes by kind: the layout of a CUPTI major, updated from a {kind: bytes} mapping (0 removes a kind). */
static int parse_record_sizes(PyObject *mapping, int major, size_t *sizes) {
    default_record_sizes(sizes, major);
    if (!mapping || mapping == Py_None) return 1;
    if (!PyDict_Check(mapping)) {
        PyErr_SetString(PyExc_TypeError, "record_sizes must be a dict {activity kind: record bytes} or None");
        return 0;
    }
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(mapping, &position, &key, &value)) {
        long kind = PyLong_AsLong(key);
        long long size = PyLong_AsLongLong(value);
        if (PyErr_Occurred()) return 0;
        if (kind < 0 || kind >= KIND_SLOTS) {
            PyErr_Format(PyExc_ValueError, "record_sizes: activity kind %ld is outside 0..%d", kind, KIND_SLOTS - 1);
            return 0;
        }
        if (size != 0 && (size < (long long)bytes_read((uint32_t)kind) || size > (long long)MAX_RECORD_BYTES)) {
            PyErr_Format(PyExc_ValueError,
                         "record_sizes: record size %lld for kind %ld must be 0 or between %zu and %zu bytes; "
                         "take it from the cupti-python dtype of that record",
                         size, kind, bytes_read((uint32_t)kind), MAX_RECORD_BYTES);
            return 0;
        }
        sizes[kind] = (size_t)size;
    }
    return 1;
}

static PyObject *py_record_sizes(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"cupti_major", NULL};
    PyObject *requested = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:record_sizes", keywords, &requested)) return NULL;
    int major = parse_major(requested);
    if (major < 0) return NULL;
    size_t sizes[KIND_SLOTS];
    default_record_sizes(sizes, major);
    PyObject *result = PyDict_New();
    for (int kind = 0; result && kind < KIND_SLOTS; kind++) {
        if (!sizes[kind]) continue;
        PyObject *k = PyLong_FromLong(kind), *v = PyLong_FromSize_t(sizes[kind]);
        if (!k || !v || PyDict_SetItem(result, k, v) < 0) Py_CLEAR(result);
        Py_XDECREF(k); Py_XDECREF(v);
    }
    return result;
}

/** {field: offset} of every field read, by record, as the headers the module was built with place them. */
static PyObject *py_record_offsets(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
#define AT(type, field) (unsigned long long)offsetof(type, field)
    return Py_BuildValue(
        "{s{sKsKsKsKsKsKsKsK}s{sKsKsKsKsKsKsKsKsKsK}s{sKsKsKsKsKsKsKsK}s{sKsKsK}s{sKsKsKsKsK}}",
        "kernel", "start", AT(KernelRecord, start), "end", AT(KernelRecord, end), "device_id", AT(KernelRecord, deviceId),
        "stream_id", AT(KernelRecord, streamId), "correlation_id", AT(KernelRecord, correlationId),
        "name", AT(KernelRecord, name), "graph_node_id", AT(KernelRecord, graphNodeId),
        "graph_id", AT(KernelRecord, graphId),
        "memcpy", "copy_kind", AT(CUpti_ActivityMemcpy6, copyKind), "src_kind", AT(CUpti_ActivityMemcpy6, srcKind),
        "dst_kind", AT(CUpti_ActivityMemcpy6, dstKind), "start", AT(CUpti_ActivityMemcpy6, start),
        "end", AT(CUpti_ActivityMemcpy6, end), "device_id", AT(CUpti_ActivityMemcpy6, deviceId),
        "stream_id", AT(CUpti_ActivityMemcpy6, streamId), "correlation_id", AT(CUpti_ActivityMemcpy6, correlationId),
        "graph_node_id", AT(CUpti_ActivityMemcpy6, graphNodeId), "graph_id", AT(CUpti_ActivityMemcpy6, graphId),
        "memset", "memory_kind", AT(CUpti_ActivityMemset4, memoryKind), "start", AT(CUpti_ActivityMemset4, start),
        "end", AT(CUpti_ActivityMemset4, end), "device_id", AT(CUpti_ActivityMemset4, deviceId),
        "stream_id", AT(CUpti_ActivityMemset4, streamId), "correlation_id", AT(CUpti_ActivityMemset4, correlationId),
        "graph_node_id", AT(CUpti_ActivityMemset4, graphNodeId), "graph_id", AT(CUpti_ActivityMemset4, graphId),
        "correlation", "external_kind", AT(CUpti_ActivityExternalCorrelation, externalKind),
        "external_id", AT(CUpti_ActivityExternalCorrelation, externalId),
        "correlation_id", AT(CUpti_ActivityExternalCorrelation, correlationId),
        "api", "cbid", AT(CUpti_ActivityAPI, cbid), "start", AT(CUpti_ActivityAPI, start), "end", AT(CUpti_ActivityAPI, end),
        "thread_id", AT(CUpti_ActivityAPI, threadId), "correlation_id", AT(CUpti_ActivityAPI, correlationId));
#undef AT
}

static PyObject *py_decode_buffer(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"buffer", "external_kind", "record_sizes", "cupti_major", NULL};
    Py_buffer view;
    int external_kind;
    PyObject *sizes = NULL, *requested = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*i|OO:decode_buffer", keywords, &view, &external_kind, &sizes,
                                     &requested))
        return NULL;
    Collector c;
    memset(&c, 0, sizeof(c));
    c.external_kind = external_kind;
    PyObject *result = NULL;
    int major = parse_major(requested);
    if (major >= 0 && parse_record_sizes(sizes, major, c.record_size)) {
        const uint8_t *data = view.buf;
        void *copy = NULL;
        if ((uintptr_t)data % RECORD_ALIGN && view.len) { /* records are read in place: align them */
            if (posix_memalign(&copy, RECORD_ALIGN, (size_t)view.len) != 0) copy = NULL;
            if (copy) memcpy(copy, data, (size_t)view.len);
            data = copy;
        }
        if (data || !view.len) {
            walk_sized(&c, data, (size_t)view.len);
            result = raw_records(&c);
        } else {
            PyErr_NoMemory();
        }
        free(copy);
    }
    collector_clear(&c);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *load_error(const char *path, const char *detail) {
    PyErr_Format(PyExc_OSError,
                 "cannot use libcupti %s (%s): import a torch built with CUDA 12.6+ or 13.x (it loads its libcupti) "
                 "or install the CUPTI wheel of its CUDA major (nvidia-cuda-cupti-cu12 for CUDA 12, nvidia-cuda-cupti "
                 "for 13), or pass decoder='python'",
                 path, detail ? detail : "unknown error");
    return NULL;
}

/** The path of the library a resolved function lives in, else `fallback`. */
static PyObject *library_path(const char *fallback) {
    Dl_info info;
    if (dladdr((void *)p_register, &info) && info.dli_fname) return PyUnicode_DecodeFSDefault(info.dli_fname);
    return PyUnicode_DecodeFSDefault(fallback);
}

static const char *loaded_from = "";

/** Open the libcupti at `path` (a file or a soname, as collection/libcupti.py decided), check that its
 * CUPTI major has a record layout here, resolve its functions; return its file. Once one is loaded,
 * later calls return it and ignore `path`. */
static PyObject *py_load(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"path", NULL};
    const char *path = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z:load", keywords, &path)) return NULL;
    if (cupti_library) return library_path(loaded_from);
    if (!path) {
        PyErr_SetString(PyExc_ValueError, "load() needs the libcupti to open: use collection.native.loaded_module()");
        return NULL;
    }
    void *handle = dlopen(path, RTLD_NOW);
    if (!handle) return load_error(path, dlerror());
    RegisterFn reg = (RegisterFn)dlsym(handle, "cuptiActivityRegisterCallbacks");
    NextRecordFn next = (NextRecordFn)dlsym(handle, "cuptiActivityGetNextRecord");
    ResultStringFn text = (ResultStringFn)dlsym(handle, "cuptiGetResultString");
    VersionFn get_version = (VersionFn)dlsym(handle, "cuptiGetVersion");
    if (!reg || !next) { dlclose(handle); return load_error(path, "cuptiActivityRegisterCallbacks not found"); }
    /* The major from the soname; the version is asked only of CUPTI 12 (whose 12.6 minimum it checks,
       and which answers without a driver) or of a library without a soname. */
    int major = soname_major(handle);
    uint32_t version = 0;
    if ((major < 0 || major == 12) && get_version && get_version(&version) != CUPTI_SUCCESS) version = 0;
    if (major < 0) major = major_of(version);
    if (major <= 0) {
        dlclose(handle);
        return load_error(path, "neither its soname (libcupti.so.<major>) nor cuptiGetVersion tells its CUPTI version");
    }
    if (major < MIN_MAJOR || major > MAX_MAJOR || (major == 12 && version && version < MIN_VERSION_12)) {
        dlclose(handle);
        PyErr_Format(PyExc_OSError,
                     "libcupti %s is CUPTI %d (API version %u), whose record layout this decoder does not know (it "
                     "reads CUPTI 12.6+, API version %d and up, and 13.x); use a torch built with CUDA 12.6+ or "
                     "13.x, or pass decoder='python'",
                     path, major, (unsigned)version, MIN_VERSION_12);
        return NULL;
    }
    p_register = reg; p_next_record = next; p_result_string = text;
    /* optional: without them the graph observer says so when started */
    p_subscribe = (SubscribeFn)dlsym(handle, "cuptiSubscribe");
    p_unsubscribe = (UnsubscribeFn)dlsym(handle, "cuptiUnsubscribe");
    p_enable_callback = (EnableCallbackFn)dlsym(handle, "cuptiEnableCallback");
    p_graph_node_id = (GraphNodeIdFn)dlsym(handle, "cuptiGetGraphNodeId");
    p_graph_id = (GraphIdFn)dlsym(handle, "cuptiGetGraphId");
    p_push = (PushFn)dlsym(handle, "cuptiActivityPushExternalCorrelationId");
    p_pop = (PopFn)dlsym(handle, "cuptiActivityPopExternalCorrelationId");
    p_set_attribute = (SetAttributeFn)dlsym(handle, "cuptiActivitySetAttribute");
    p_timestamp = (TimestampFn)dlsym(handle, "cuptiGetTimestamp");
    char *kept = strdup(path);
    loaded_from = kept ? kept : "libcupti";
    pthread_mutex_lock(&live_lock);
    loaded_major = major;
    running_version = version;
    default_record_sizes(live.record_size, major);
    pthread_mutex_unlock(&live_lock);
    cupti_library = handle;
    return library_path(loaded_from);
}

/** The file of the loaded libcupti, or None before load(). */
static PyObject *py_library(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    if (!cupti_library) Py_RETURN_NONE;
    return library_path(loaded_from);
}

/** The loaded libcupti's CUPTI API version (cuptiGetVersion), or None before load() or where not asked. */
static PyObject *py_cupti_version(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    if (!running_version) Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(running_version);
}

/** The CUPTI major whose record layout decodes by default: the loaded libcupti's, else the headers'. */
static PyObject *py_cupti_major(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyLong_FromLong(running_major());
}

static PyObject *py_register(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"external_kind", "record_sizes", NULL};
    int external_kind;
    PyObject *sizes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|O:register", keywords, &external_kind, &sizes)) return NULL;
    size_t parsed[KIND_SLOTS];
    if (!parse_record_sizes(sizes, running_major(), parsed)) return NULL;
    if (!p_register) {
        PyErr_SetString(PyExc_RuntimeError, "libcupti is not loaded: call _cupti_native.load() first");
        return NULL;
    }
    if (!cuda_driver_present(1)) {
        PyErr_SetString(PyExc_RuntimeError, NO_DRIVER);
        return NULL;
    }
    lock_live();
    collector_clear(&live);
    live.external_kind = external_kind;
    memcpy(live.record_size, parsed, sizeof(parsed));
    live_walk_cupti = 1;
    buffers_requested = buffers_completed = foreign_buffers = 0;
    pool_hits = pool_misses = 0;
    pthread_mutex_unlock(&live_lock);
    CUptiResult status = p_register(buffer_requested, buffer_completed);
    if (status != CUPTI_SUCCESS) {
        const char *text = NULL;
        if (!p_result_string || p_result_string(status, &text) != CUPTI_SUCCESS || !text) text = "no description";
        PyErr_Format(PyExc_RuntimeError,
                     "cuptiActivityRegisterCallbacks failed with CUPTI error %d (%s); is a CUDA driver and GPU "
                     "present? pass decoder='python' to compare",
                     (int)status, text);
        return NULL;
    }
    Py_RETURN_NONE;
}

/** Append the launch callbacks' rows (cupti_callbacks.c) to a collector's links and API calls. */
static void add_launch_rows(Collector *c) {
    LaunchRows taken = launch_rows_take();
    for (size_t i = 0; i < taken.links; i++) push_link(c, (uint32_t)taken.link_correlation_id[i], (uint64_t)taken.link_id[i]);
    for (size_t i = 0; i < taken.calls; i++)
        append_call(c, taken.correlation_id[i], taken.api[i], taken.cbid[i], taken.start_ns[i], taken.end_ns[i],
                    taken.thread[i]);
    c->lost += taken.lost;
    launch_rows_free(&taken);
}

static PyObject *py_take(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    lock_live();
    Collector taken = live;
    memset(&live, 0, sizeof(live));
    live.external_kind = taken.external_kind;
    memcpy(live.record_size, taken.record_size, sizeof(live.record_size));
    pthread_mutex_unlock(&live_lock);
    add_launch_rows(&taken);
    PyObject *result = raw_records(&taken);
    collector_clear(&taken);
    return result;
}

static PyObject *py_stats(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    lock_live();
    unsigned long long requested = buffers_requested, completed = buffers_completed, foreign = foreign_buffers;
    unsigned long long pending = outstanding_count;
    unsigned long long hits = pool_hits, misses = pool_misses, pooled = pool_count;
    int walk = live_walk_cupti, zeroed = buffers_come_zeroed;
    pthread_mutex_unlock(&live_lock);
    return Py_BuildValue("{sKsKsKsKsKsKsKsssO}", "buffers_requested", requested, "buffers_completed", completed,
                         "foreign_buffers", foreign, "outstanding_buffers", pending, "pool_hits", hits,
                         "pool_misses", misses, "pooled_buffers", pooled, "walk", walk ? "cupti" : "sized",
                         "buffers_zeroed", zeroed ? Py_True : Py_False);
}

/** Feed buffers through the real callbacks, as CUPTI would (sized walk unless registered). */
static PyObject *py_simulate_delivery(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"buffer", "foreign", NULL};
    Py_buffer view;
    int foreign = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|p:_simulate_delivery", keywords, &view, &foreign)) return NULL;
    if ((size_t)view.len > BUFFER_BYTES) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "_simulate_delivery: the buffer is larger than a CUPTI buffer (8 MiB)");
        return NULL;
    }
    uint8_t *buffer = NULL;
    size_t size = 0, max_records = 0;
    if (foreign) {
        void *memory = NULL;
        if (posix_memalign(&memory, RECORD_ALIGN, BUFFER_BYTES) == 0) buffer = memory, size = BUFFER_BYTES;
    } else {
        buffer_requested(&buffer, &size, &max_records);
    }
    if (!buffer) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
    memcpy(buffer, view.buf, (size_t)view.len);
    Py_BEGIN_ALLOW_THREADS
    buffer_completed(NULL, 0, buffer, size, (size_t)view.len);
    Py_END_ALLOW_THREADS
    if (foreign) free(buffer);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *py_reset(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"external_kind", "record_sizes", "cupti_major", NULL};
    int external_kind;
    PyObject *sizes = NULL, *requested = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|OO:_reset", keywords, &external_kind, &sizes, &requested))
        return NULL;
    size_t parsed[KIND_SLOTS];
    int major = parse_major(requested);
    if (major < 0 || !parse_record_sizes(sizes, major, parsed)) return NULL;
    lock_live();
    collector_clear(&live);
    live.external_kind = external_kind;
    memcpy(live.record_size, parsed, sizeof(parsed));
    live_walk_cupti = 0;
    buffers_requested = buffers_completed = foreign_buffers = 0;
    pool_hits = pool_misses = 0;
    pthread_mutex_unlock(&live_lock);
    launch_rows_reset();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"load", (PyCFunction)(void (*)(void))py_load, METH_VARARGS | METH_KEYWORDS,
     "Open the libcupti at this path or soname, check its CUPTI version, resolve its functions; return its file."},
    {"library", py_library, METH_NOARGS, "The file of the loaded libcupti, or None before load()."},
    {"cupti_version", py_cupti_version, METH_NOARGS, "The loaded libcupti's CUPTI API version, or None."},
    {"cupti_major", py_cupti_major, METH_NOARGS, "The CUPTI major whose layout decodes by default."},
    {"record_offsets", py_record_offsets, METH_NOARGS, "Offsets of the fields read, by record, in the headers built with."},
    {"register", (PyCFunction)(void (*)(void))py_register, METH_VARARGS | METH_KEYWORDS,
     "Register this module's CUPTI buffer callbacks and forget older records."},
    {"take", py_take, METH_NOARGS, "Every record delivered since register(), as raw columns; resets them."},
    {"decode_buffer", (PyCFunction)(void (*)(void))py_decode_buffer, METH_VARARGS | METH_KEYWORDS,
     "Decode one activity buffer (replay, no CUPTI needed) into raw columns."},
    {"record_sizes", (PyCFunction)(void (*)(void))py_record_sizes, METH_VARARGS | METH_KEYWORDS,
     "Record sizes by activity kind of a CUPTI major's layout (default: the running one)."},
    {"stats", py_stats, METH_NOARGS, "Buffer counters of the live collector since register()."},
    {"prepare_buffers", py_prepare_buffers, METH_VARARGS,
     "Keep this many zeroed, faulted-in activity buffers ready (0 releases them); return how many are ready."},
    {"_pool_is_zeroed", py_pool_is_zeroed, METH_NOARGS, "Test hook: whether every pooled buffer is all zeros."},
    {"buffers_zeroed", py_buffers_zeroed, METH_VARARGS,
     "Tell CUPTI our buffers come zeroed (True) or that it zeroes them (False, its default); True if CUPTI took it."},
    {"_simulate_delivery", (PyCFunction)(void (*)(void))py_simulate_delivery, METH_VARARGS | METH_KEYWORDS,
     "Test hook: pass one buffer through the real CUPTI callbacks."},
    {"_reset", (PyCFunction)(void (*)(void))py_reset, METH_VARARGS | METH_KEYWORDS,
     "Test hook: reset the live collector without registering with CUPTI."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cupti_native", "CUPTI activity buffers decoded into columns (native_shims/).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cupti_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, callback_methods) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "BUFFER_BYTES", (long)BUFFER_BYTES) < 0
        || PyModule_AddIntConstant(m, "CUPTI_API_VERSION", CUPTI_API_VERSION) < 0
        || PyModule_AddIntConstant(m, "CUPTI_HEADER_MAJOR", HEADER_MAJOR) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    pthread_mutex_lock(&live_lock);
    if (!live.record_size[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]) default_record_sizes(live.record_size, running_major());
    pthread_mutex_unlock(&live_lock);
    return m;
}
