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
 * libcupti is never linked: its functions are resolved at run time from the copy already in the
 * process (dlopen by soname with RTLD_NOLOAD, the one torch / cupti-python loaded), so importing
 * this module works on a machine without a GPU. cuptiFinalize is never called.
 *
 * Record layouts: CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
 * CUpti_ActivityAPI (the CUPTI 13.0 records; later 13.x headers keep them in cupti_activity_deprecated.h and only append
 * fields to their successors, so the offsets read here are the same). Live buffers are walked with
 * cuptiActivityGetNextRecord (always right for the running libcupti); decode_buffer() replays
 * buffers with our own walk, sized per kind, so tests run without a driver.
 *
 * Kernel, copy and set rows carry the CUDA graph they were replayed from (graphId, graphNodeId; 0
 * outside graphs). The graph observer (graph_observer_start/stop/take) enables two CUPTI resource
 * callbacks while profile() runs: a node created during a stream capture is recorded with the id on
 * top of the capturing thread's stack (ours, else CUPTI's external-correlation stack, popped and
 * pushed back), and a node cloned when a graph is instantiated with the node it was cloned from
 * (replayed kernels carry the clone's ids).
 *
 * Launch correlation: the tracer pushes its op and scope ids on this module's per-thread stack
 * (correlation_functions), and the launch callback (launch_callbacks_start) links each launch's
 * correlation id to the top of the launching thread's stack and records the call, so no
 * external-correlation or API activity record is needed. The graph observer and the launch
 * callbacks share one CUPTI subscription; CUPTI allows one subscriber per process: where another
 * tool holds it, starting either fails with CUPTI's error and nothing else changes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
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
#define CUPTI_SONAME "libcupti.so.13"

/* records.KIND_KERNEL / KIND_MEMCPY / KIND_MEMSET */
enum { ROW_KERNEL = 0, ROW_MEMCPY = 1, ROW_MEMSET = 2 };
/* records.API_RUNTIME / API_DRIVER */
enum { API_RUNTIME = 0, API_DRIVER = 1 };

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
typedef __typeof__(&cuptiGetResultString) ResultStringFn;
typedef __typeof__(&cuptiSubscribe) SubscribeFn;
typedef __typeof__(&cuptiUnsubscribe) UnsubscribeFn;
typedef __typeof__(&cuptiEnableCallback) EnableCallbackFn;
typedef __typeof__(&cuptiGetGraphNodeId) GraphNodeIdFn;
typedef __typeof__(&cuptiGetGraphId) GraphIdFn;
typedef __typeof__(&cuptiActivityPushExternalCorrelationId) PushFn;
typedef __typeof__(&cuptiActivityPopExternalCorrelationId) PopFn;
typedef __typeof__(&cuptiActivitySetAttribute) SetAttributeFn;

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
static int grow(void **array, size_t element, size_t cap) {
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

static void push_call(Collector *c, const CUpti_ActivityAPI *a, int8_t api) {
    if (!reserve_call(c)) { c->lost++; return; }
    size_t r = c->calls++;
    c->api_correlation_id[r] = a->correlationId;
    c->api_kind[r] = api;
    c->api_cbid[r] = (int32_t)a->cbid;
    c->api_start_ns[r] = (int64_t)a->start;
    c->api_end_ns[r] = (int64_t)a->end;
    c->api_thread[r] = a->threadId;
}

/* ---------------------------------------------------------------------------------------------- */
/* records                                                                                        */

/** Append one record to the columns (kernels, copies, sets, our correlation kind, API calls); count all. */
static void decode_record(Collector *c, const CUpti_Activity *record) {
    c->records++;
    switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)record;
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

static void default_record_sizes(size_t *sizes) {
    memset(sizes, 0, sizeof(size_t) * KIND_SLOTS);
    sizes[CUPTI_ACTIVITY_KIND_KERNEL] = sizeof(CUpti_ActivityKernel10);
    sizes[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] = sizeof(CUpti_ActivityKernel10);
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
        return MAX2(MAX2(FIELD_END(CUpti_ActivityKernel10, name), FIELD_END(CUpti_ActivityKernel10, correlationId)),
                    MAX2(FIELD_END(CUpti_ActivityKernel10, graphNodeId), FIELD_END(CUpti_ActivityKernel10, graphId)));
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
static ResultStringFn p_result_string;
/* the graph observer's functions: resolved with the others, optional (NULL: no observer) */
static SubscribeFn p_subscribe;
static UnsubscribeFn p_unsubscribe;
static EnableCallbackFn p_enable_callback;
static GraphNodeIdFn p_graph_node_id;
static GraphIdFn p_graph_id;
static PushFn p_push;
static PopFn p_pop;
static SetAttributeFn p_set_attribute; /* optional: without it CUPTI zeroes every buffer itself */

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
    if (!p_set_attribute) Py_RETURN_FALSE;
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
/* our correlation stack: per thread, what CUPTI's external-correlation stack would hold          */
/*
 * With launch correlation the tracer pushes its op and scope ids here instead of into CUPTI
 * (correlation_functions() hands it these two entry points), and the launch callback reads the top on
 * the launching thread: the id CUPTI would have linked to that launch, with no CUPTI call per op.
 * correlation_reset() bumps a generation, so entries an interrupted pass left behind read as empty.
 */

typedef struct {
    uint64_t *ids;
    size_t depth, cap;
    uint64_t overflow; /* pushes that found no memory: their pops pop nothing */
    uint64_t generation;
} IdStack;

static __thread IdStack id_stack;
static uint64_t stack_generation = 1;
static pthread_key_t stack_key; /* its destructor frees a thread's ids when the thread exits */
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;

static void free_stack(void *stack) {
    IdStack *s = (IdStack *)stack;
    free(s->ids);
    s->ids = NULL;
    s->cap = s->depth = 0;
}

static void make_stack_key(void) { pthread_key_create(&stack_key, free_stack); }

static IdStack *this_thread_stack(void) {
    IdStack *s = &id_stack;
    uint64_t generation = __atomic_load_n(&stack_generation, __ATOMIC_RELAXED);
    if (s->generation != generation) {
        s->depth = 0;
        s->overflow = 0;
        s->generation = generation;
    }
    return s;
}

/* The signatures of cuptiActivityPush/PopExternalCorrelationId, so the tracer calls either alike;
 * one stack serves every kind (the tracer uses one). */
static int stack_push(int kind, uint64_t id) {
    (void)kind;
    IdStack *s = this_thread_stack();
    if (s->overflow == 0 && s->depth == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        if (!grow((void **)&s->ids, sizeof(uint64_t), cap)) { s->overflow++; return CUPTI_ERROR_OUT_OF_MEMORY; }
        if (!s->cap) {
            pthread_once(&stack_key_once, make_stack_key);
            pthread_setspecific(stack_key, s);
        }
        s->cap = cap;
    } else if (s->overflow) {
        s->overflow++;
        return CUPTI_ERROR_OUT_OF_MEMORY;
    }
    s->ids[s->depth++] = id;
    return CUPTI_SUCCESS;
}

static int stack_pop(int kind, uint64_t *last_id) {
    (void)kind;
    IdStack *s = this_thread_stack();
    if (s->overflow) { s->overflow--; return CUPTI_ERROR_OUT_OF_MEMORY; }
    if (!s->depth) return CUPTI_ERROR_INVALID_OPERATION;
    uint64_t id = s->ids[--s->depth];
    if (last_id) *last_id = id;
    return CUPTI_SUCCESS;
}

/** The id on top of this thread's stack; 0 where it is empty (or an overflowed push is on top). */
static int stack_top(uint64_t *id) {
    IdStack *s = this_thread_stack();
    if (!s->depth || s->overflow) return 0;
    *id = s->ids[s->depth - 1];
    return 1;
}

/* ---------------------------------------------------------------------------------------------- */
/* the one CUPTI subscription: graph-node resource callbacks and launch API callbacks             */

static PyObject *column(const void *data, size_t count, size_t element); /* Python surface, below */

static CUpti_SubscriberHandle subscriber;
static int subscribed;
static int graph_on;  /* the graph observer's resource callbacks are enabled */
static int launch_on; /* the launch callbacks are enabled */

static void CUPTIAPI graph_callback(CUpti_CallbackId cbid, const void *cbdata);
static void launch_callback(int8_t api, CUpti_CallbackId cbid, const CUpti_CallbackData *data);

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *cbdata) {
    (void)userdata;
    if (!cbdata) return;
    switch (domain) {
    case CUPTI_CB_DOMAIN_RESOURCE:
        if (graph_on) graph_callback(cbid, cbdata);
        break;
    case CUPTI_CB_DOMAIN_RUNTIME_API:
        if (launch_on) launch_callback(API_RUNTIME, cbid, (const CUpti_CallbackData *)cbdata);
        break;
    case CUPTI_CB_DOMAIN_DRIVER_API:
        if (launch_on) launch_callback(API_DRIVER, cbid, (const CUpti_CallbackData *)cbdata);
        break;
    default:
        break;
    }
}

/** Text of a CUPTI status, for error messages. */
static const char *status_text(CUptiResult status) {
    const char *text = NULL;
    if (!p_result_string || p_result_string(status, &text) != CUPTI_SUCCESS || !text) text = "no description";
    return text;
}

/** Subscribe unless subscribed; 0 with a Python error set on failure. */
static int subscribe_once(void) {
    if (subscribed) return 1;
    CUpti_SubscriberHandle handle = NULL;
    CUptiResult status = p_subscribe(&handle, (CUpti_CallbackFunc)on_callback, NULL);
    if (status != CUPTI_SUCCESS) {
        PyErr_Format(PyExc_RuntimeError, "cuptiSubscribe failed with CUPTI error %d (%s)", (int)status,
                     status_text(status));
        return 0;
    }
    subscriber = handle;
    subscribed = 1;
    return 1;
}

/** Unsubscribe once neither the graph observer nor the launch callbacks need the subscription. */
static CUptiResult unsubscribe_if_idle(void) {
    if (!subscribed || graph_on || launch_on) return CUPTI_SUCCESS;
    CUptiResult status = p_unsubscribe(subscriber);
    subscribed = 0;
    subscriber = NULL;
    return status;
}

/* ---------------------------------------------------------------------------------------------- */
/* the graph observer: CUDA graph nodes created during captures, and their clones                 */

enum { GRAPH_CREATED = 0, GRAPH_CLONED = 1 }; /* schema.GRAPH_NODE_CREATED / GRAPH_NODE_CLONED */
#define NO_EXTERNAL_ID (-1)

typedef struct {
    int8_t *event;
    int64_t *graph_id, *node_id, *external_id, *original_graph_id, *original_node_id;
    int32_t *node_type;
    size_t rows, cap;
    uint64_t lost, id_errors;
} GraphRows;

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static GraphRows graph_rows;
static int32_t graph_external_kind;
static const CUpti_CallbackId graph_cbids[] = {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
                                               CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED};
#define GRAPH_CBIDS (sizeof(graph_cbids) / sizeof(graph_cbids[0]))

static void graph_rows_clear(GraphRows *g) {
    free(g->event); free(g->graph_id); free(g->node_id); free(g->external_id);
    free(g->original_graph_id); free(g->original_node_id); free(g->node_type);
    memset(g, 0, sizeof(*g));
}

/** Append one graph-node row (caller holds graph_lock); counted as lost when out of memory. */
static void push_graph_row(GraphRows *g, int8_t event, uint32_t graph, uint64_t node, int64_t external,
                           uint32_t original_graph, uint64_t original_node, int32_t node_type) {
    if (g->rows == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 1024;
        int ok = grow((void **)&g->event, sizeof(int8_t), cap) && grow((void **)&g->graph_id, sizeof(int64_t), cap)
            && grow((void **)&g->node_id, sizeof(int64_t), cap) && grow((void **)&g->external_id, sizeof(int64_t), cap)
            && grow((void **)&g->original_graph_id, sizeof(int64_t), cap)
            && grow((void **)&g->original_node_id, sizeof(int64_t), cap)
            && grow((void **)&g->node_type, sizeof(int32_t), cap);
        if (!ok) { g->lost++; return; }
        g->cap = cap;
    }
    size_t r = g->rows++;
    g->event[r] = event;
    g->graph_id[r] = graph;
    g->node_id[r] = (int64_t)node;
    g->external_id[r] = external;
    g->original_graph_id[r] = original_graph;
    g->original_node_id[r] = (int64_t)original_node;
    g->node_type[r] = node_type;
}

/** The id on top of this thread's stack: ours where the tracer pushes here (launch correlation), else
 * CUPTI's of our kind, left in place (popped and pushed back); NO_EXTERNAL_ID if both are empty. */
static int64_t current_external_id(void) {
    uint64_t id = 0;
    if (stack_top(&id)) return (int64_t)id;
    if (!p_pop || !p_push || p_pop((CUpti_ExternalCorrelationKind)graph_external_kind, &id) != CUPTI_SUCCESS)
        return NO_EXTERNAL_ID;
    p_push((CUpti_ExternalCorrelationKind)graph_external_kind, id);
    return (int64_t)id;
}

static void CUPTIAPI graph_callback(CUpti_CallbackId cbid, const void *cbdata) {
    const CUpti_ResourceData *resource = (const CUpti_ResourceData *)cbdata;
    const CUpti_GraphData *graph = (const CUpti_GraphData *)resource->resourceDescriptor;
    if (!graph || !graph->node) return;
    uint64_t node = 0, original_node = 0;
    uint32_t graph_id = 0, original_graph_id = 0;
    int ok = p_graph_node_id(graph->node, &node) == CUPTI_SUCCESS;
    if (ok && graph->graph) ok = p_graph_id(graph->graph, &graph_id) == CUPTI_SUCCESS;
    int8_t event;
    int64_t external = NO_EXTERNAL_ID;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
        event = GRAPH_CREATED;
        external = current_external_id();
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
        event = GRAPH_CLONED;
        if (ok && graph->originalNode) ok = p_graph_node_id(graph->originalNode, &original_node) == CUPTI_SUCCESS;
        if (ok && graph->originalGraph) ok = p_graph_id(graph->originalGraph, &original_graph_id) == CUPTI_SUCCESS;
    } else {
        return;
    }
    pthread_mutex_lock(&graph_lock);
    if (ok) push_graph_row(&graph_rows, event, graph_id, node, external, original_graph_id, original_node,
                           (int32_t)graph->nodeType);
    else graph_rows.id_errors++;
    pthread_mutex_unlock(&graph_lock);
}

static int callbacks_resolved(void) { return p_subscribe && p_unsubscribe && p_enable_callback; }

static int graph_functions_resolved(void) { return callbacks_resolved() && p_graph_node_id && p_graph_id && p_push && p_pop; }

static PyObject *py_graph_observer_start(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"external_kind", NULL};
    int external_kind;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i:graph_observer_start", keywords, &external_kind)) return NULL;
    if (!graph_functions_resolved()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this libcupti lacks the callback or graph-id functions the graph observer needs "
                        "(call _cupti_native.load() first)");
        return NULL;
    }
    if (graph_on) {
        PyErr_SetString(PyExc_RuntimeError, "the graph observer is already running; stop it first");
        return NULL;
    }
    pthread_mutex_lock(&graph_lock);
    graph_rows_clear(&graph_rows);
    graph_external_kind = external_kind;
    pthread_mutex_unlock(&graph_lock);
    if (!subscribe_once()) return NULL;
    for (size_t i = 0; i < GRAPH_CBIDS; i++) {
        CUptiResult status = p_enable_callback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, graph_cbids[i]);
        if (status != CUPTI_SUCCESS) {
            for (size_t j = 0; j < i; j++) p_enable_callback(0, subscriber, CUPTI_CB_DOMAIN_RESOURCE, graph_cbids[j]);
            unsubscribe_if_idle();
            PyErr_Format(PyExc_RuntimeError, "cuptiEnableCallback(resource %d) failed with CUPTI error %d (%s)",
                         (int)graph_cbids[i], (int)status, status_text(status));
            return NULL;
        }
    }
    graph_on = 1;
    Py_RETURN_NONE;
}

static PyObject *py_graph_observer_stop(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    if (!graph_on) Py_RETURN_TRUE;
    graph_on = 0;
    CUptiResult status = CUPTI_SUCCESS;
    for (size_t i = 0; i < GRAPH_CBIDS; i++) {
        CUptiResult disabled = p_enable_callback(0, subscriber, CUPTI_CB_DOMAIN_RESOURCE, graph_cbids[i]);
        if (status == CUPTI_SUCCESS) status = disabled;
    }
    CUptiResult released = unsubscribe_if_idle();
    if (status == CUPTI_SUCCESS) status = released;
    if (status != CUPTI_SUCCESS) {
        PyErr_Format(PyExc_RuntimeError, "cuptiUnsubscribe failed with CUPTI error %d (%s)", (int)status,
                     status_text(status));
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* ---------------------------------------------------------------------------------------------- */
/* launch callbacks: each launch / copy / set API call linked to the id on top of our stack       */
/*
 * At a launch's API entry, on the launching thread, the callback links CUPTI's correlation id to the
 * top of our stack (the row an EXTERNAL_CORRELATION record would give) and, with launch rows on,
 * records the call (api, cbid, CUPTI timestamps at entry and exit, OS thread id): the row an API
 * activity record would give. Rows go to their own arrays under their own lock, so a launch never
 * waits for a buffer being decoded; take() appends them to the activity columns.
 */

typedef struct {
    int64_t *link_correlation_id, *link_id;
    size_t links, link_cap;
    int64_t *correlation_id, *start_ns, *end_ns, *thread;
    int8_t *api;
    int32_t *cbid;
    size_t calls, call_cap;
    uint64_t lost;
} LaunchRows;

typedef __typeof__(&cuptiGetTimestamp) TimestampFn;
static TimestampFn p_timestamp;
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static LaunchRows launch_rows;
static int launch_rows_on;        /* record the calls themselves (the launches table) */
static uint32_t launch_generation; /* in the top half of correlationData: an exit after a take finds no row */
static CUpti_CallbackId *launch_cbids[2];
static size_t launch_cbid_count[2];
/* the callback ids enabled, per domain: CUPTI also calls in with others (seen on a thread's first
 * launches), which API records leave out, so the callback does too */
#define CBID_SLOTS 4096
static uint8_t launch_cbid_on[2][CBID_SLOTS];
static __thread int64_t os_thread_id;
static __thread int runtime_depth; /* enabled runtime calls open on this thread, in this collection */
static __thread uint32_t runtime_depth_generation;

static void launch_rows_clear(LaunchRows *l) {
    free(l->link_correlation_id); free(l->link_id);
    free(l->correlation_id); free(l->start_ns); free(l->end_ns); free(l->thread); free(l->api); free(l->cbid);
    memset(l, 0, sizeof(*l));
}

/** CUPTI's threadId of the calling thread (what its API records carry: pthread_self, cut to 32 bits). */
static int64_t this_os_thread(void) {
    if (!os_thread_id) os_thread_id = (int64_t)(uint32_t)(uintptr_t)pthread_self();
    return os_thread_id;
}

static uint64_t timestamp_now(void) {
    uint64_t stamp = 0;
    if (!p_timestamp || p_timestamp(&stamp) != CUPTI_SUCCESS) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        stamp = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    }
    return stamp;
}

/** Append a link (caller holds launch_lock). */
static void launch_link(LaunchRows *l, uint32_t correlation, uint64_t id) {
    if (l->links == l->link_cap) {
        size_t cap = l->link_cap ? l->link_cap * 2 : 4096;
        if (!grow((void **)&l->link_correlation_id, sizeof(int64_t), cap) || !grow((void **)&l->link_id, sizeof(int64_t), cap)) {
            l->lost++;
            return;
        }
        l->link_cap = cap;
    }
    l->link_correlation_id[l->links] = correlation;
    l->link_id[l->links] = (int64_t)id;
    l->links++;
}

/** Append a call row, returning its index + 1, or 0 when out of memory (caller holds launch_lock). */
static size_t launch_call(LaunchRows *l, uint32_t correlation, int8_t api, CUpti_CallbackId cbid, uint64_t start) {
    if (l->calls == l->call_cap) {
        size_t cap = l->call_cap ? l->call_cap * 2 : 4096;
        int ok = grow((void **)&l->correlation_id, sizeof(int64_t), cap) && grow((void **)&l->start_ns, sizeof(int64_t), cap)
            && grow((void **)&l->end_ns, sizeof(int64_t), cap) && grow((void **)&l->thread, sizeof(int64_t), cap)
            && grow((void **)&l->api, sizeof(int8_t), cap) && grow((void **)&l->cbid, sizeof(int32_t), cap);
        if (!ok) { l->lost++; return 0; }
        l->call_cap = cap;
    }
    size_t r = l->calls++;
    l->correlation_id[r] = correlation;
    l->api[r] = api;
    l->cbid[r] = (int32_t)cbid;
    l->start_ns[r] = (int64_t)start;
    l->end_ns[r] = (int64_t)start;
    l->thread[r] = this_os_thread();
    return r + 1;
}

/* The runtime makes its launches through the driver, and CUPTI calls a driver callback for those
 * too (API records it leaves out): a driver call inside a runtime call on the same thread is part of
 * that call, whose correlation id its work carries, so it is neither linked nor recorded. */
static void launch_callback(int8_t api, CUpti_CallbackId cbid, const CUpti_CallbackData *data) {
    if (cbid >= CBID_SLOTS || !launch_cbid_on[api][cbid]) return;
    uint32_t generation = __atomic_load_n(&launch_generation, __ATOMIC_RELAXED);
    if (runtime_depth_generation != generation) { /* a call left open when the callbacks were disabled */
        runtime_depth = 0;
        runtime_depth_generation = generation;
    }
    if (api == API_DRIVER && runtime_depth > 0) return;
    if (api == API_RUNTIME) {
        if (data->callbackSite == CUPTI_API_ENTER) runtime_depth++;
        else if (runtime_depth > 0) runtime_depth--;
    }
    if (data->callbackSite == CUPTI_API_ENTER) {
        uint64_t id = 0;
        int linked = stack_top(&id);
        int rows = launch_rows_on;
        if (!linked && !rows) return;
        uint64_t start = rows ? timestamp_now() : 0;
        uint64_t tag = 0;
        pthread_mutex_lock(&launch_lock);
        if (linked) launch_link(&launch_rows, data->correlationId, id);
        if (rows) {
            size_t row = launch_call(&launch_rows, data->correlationId, api, cbid, start);
            if (row && row <= UINT32_MAX) tag = ((uint64_t)launch_generation << 32) | (uint64_t)row;
        }
        pthread_mutex_unlock(&launch_lock);
        if (data->correlationData) *data->correlationData = tag;
    } else if (data->callbackSite == CUPTI_API_EXIT && data->correlationData && *data->correlationData) {
        uint64_t tag = *data->correlationData, end = timestamp_now();
        size_t row = (size_t)(tag & 0xffffffffu);
        pthread_mutex_lock(&launch_lock);
        if ((uint32_t)(tag >> 32) == launch_generation && row && row <= launch_rows.calls)
            launch_rows.end_ns[row - 1] = (int64_t)end;
        pthread_mutex_unlock(&launch_lock);
    }
}

/** Disable every launch callback id enabled (the subscription stays for the graph observer). */
static CUptiResult disable_launch_cbids(void) {
    CUptiResult first = CUPTI_SUCCESS;
    static const CUpti_CallbackDomain domains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API};
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; i < launch_cbid_count[d]; i++) {
            CUptiResult status = p_enable_callback(0, subscriber, domains[d], launch_cbids[d][i]);
            if (first == CUPTI_SUCCESS) first = status;
        }
        memset(launch_cbid_on[d], 0, sizeof(launch_cbid_on[d]));
        free(launch_cbids[d]);
        launch_cbids[d] = NULL;
        launch_cbid_count[d] = 0;
    }
    return first;
}

/** A sequence of callback ids as a malloc'ed array; 0 with a Python error set. */
static int parse_cbids(PyObject *sequence, const char *name, CUpti_CallbackId **out, size_t *count) {
    PyObject *fast = PySequence_Fast(sequence, name);
    if (!fast) return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    CUpti_CallbackId *ids = malloc(sizeof(CUpti_CallbackId) * (size_t)(n ? n : 1));
    if (!ids) { Py_DECREF(fast); PyErr_NoMemory(); return 0; }
    for (Py_ssize_t i = 0; i < n; i++) {
        long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (value < 0) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: callback ids are >= 0, got %ld", name, value);
            free(ids);
            Py_DECREF(fast);
            return 0;
        }
        ids[i] = (CUpti_CallbackId)value;
    }
    Py_DECREF(fast);
    *out = ids;
    *count = (size_t)n;
    return 1;
}

static PyObject *py_launch_callbacks_start(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"runtime_cbids", "driver_cbids", "launch_rows", NULL};
    PyObject *runtime, *driver;
    int rows = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|p:launch_callbacks_start", keywords, &runtime, &driver, &rows))
        return NULL;
    if (!callbacks_resolved()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this libcupti lacks the callback functions launch correlation needs (call "
                        "_cupti_native.load() first), or pass correlation='push'");
        return NULL;
    }
    if (launch_on) {
        PyErr_SetString(PyExc_RuntimeError, "the launch callbacks are already on; stop them first");
        return NULL;
    }
    CUpti_CallbackId *ids[2] = {NULL, NULL};
    size_t counts[2] = {0, 0};
    if (!parse_cbids(runtime, "runtime_cbids", &ids[0], &counts[0])) return NULL;
    if (!parse_cbids(driver, "driver_cbids", &ids[1], &counts[1])) { free(ids[0]); return NULL; }
    pthread_mutex_lock(&launch_lock);
    launch_rows_clear(&launch_rows);
    launch_generation++;
    launch_rows_on = rows;
    pthread_mutex_unlock(&launch_lock);
    if (!subscribe_once()) { free(ids[0]); free(ids[1]); return NULL; }
    static const CUpti_CallbackDomain domains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API};
    for (int d = 0; d < 2; d++) {
        launch_cbids[d] = ids[d];
        launch_cbid_count[d] = 0;
        for (size_t i = 0; i < counts[d]; i++) {
            CUptiResult status = p_enable_callback(1, subscriber, domains[d], ids[d][i]);
            if (status != CUPTI_SUCCESS) {
                int failed = (int)ids[d][i]; /* before the cleanup frees ids[d] (now launch_cbids[d]) */
                if (d == 0) { free(ids[1]); }
                disable_launch_cbids();
                unsubscribe_if_idle();
                PyErr_Format(PyExc_RuntimeError, "cuptiEnableCallback(%s %d) failed with CUPTI error %d (%s)",
                             d == 0 ? "runtime" : "driver", failed, (int)status, status_text(status));
                return NULL;
            }
            launch_cbid_count[d] = i + 1;
            if (ids[d][i] < CBID_SLOTS) launch_cbid_on[d][ids[d][i]] = 1;
        }
    }
    launch_on = 1;
    Py_RETURN_NONE;
}

static PyObject *py_launch_callbacks_stop(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    if (!launch_on) Py_RETURN_TRUE;
    launch_on = 0;
    CUptiResult status = disable_launch_cbids();
    CUptiResult released = unsubscribe_if_idle();
    if (status == CUPTI_SUCCESS) status = released;
    if (status != CUPTI_SUCCESS) {
        PyErr_Format(PyExc_RuntimeError, "stopping the launch callbacks failed with CUPTI error %d (%s)", (int)status,
                     status_text(status));
        return NULL;
    }
    Py_RETURN_TRUE;
}

/** Move the launch callbacks' rows into a collector (its links and API calls); count what is lost. */
static void take_launch_rows(Collector *c) {
    pthread_mutex_lock(&launch_lock);
    LaunchRows taken = launch_rows;
    memset(&launch_rows, 0, sizeof(launch_rows));
    launch_generation++;
    pthread_mutex_unlock(&launch_lock);
    for (size_t i = 0; i < taken.links; i++) push_link(c, (uint32_t)taken.link_correlation_id[i], (uint64_t)taken.link_id[i]);
    for (size_t i = 0; i < taken.calls; i++) {
        if (!reserve_call(c)) { c->lost++; continue; }
        size_t r = c->calls++;
        c->api_correlation_id[r] = taken.correlation_id[i];
        c->api_kind[r] = taken.api[i];
        c->api_cbid[r] = taken.cbid[i];
        c->api_start_ns[r] = taken.start_ns[i];
        c->api_end_ns[r] = taken.end_ns[i];
        c->api_thread[r] = taken.thread[i];
    }
    c->lost += taken.lost;
    launch_rows_clear(&taken);
}

/* -- the correlation stack and the launch callback, from Python ------------------------------- */

/** Why the launch callbacks cannot be had (as a str), or None: subscribes and unsubscribes to find out. */
static PyObject *py_callbacks_unavailable(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    if (!callbacks_resolved())
        return PyUnicode_FromString("this libcupti lacks the callback functions (cuptiSubscribe, cuptiEnableCallback)");
    if (subscribed) Py_RETURN_NONE;
    CUpti_SubscriberHandle handle = NULL;
    CUptiResult status = p_subscribe(&handle, (CUpti_CallbackFunc)on_callback, NULL);
    if (status != CUPTI_SUCCESS)
        return PyUnicode_FromFormat("cuptiSubscribe failed with CUPTI error %d (%s)", (int)status, status_text(status));
    p_unsubscribe(handle);
    Py_RETURN_NONE;
}

static PyObject *py_correlation_functions(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)&stack_push, (unsigned long long)(uintptr_t)&stack_pop);
}

static PyObject *py_correlation_push(PyObject *self, PyObject *args) {
    (void)self;
    int kind;
    unsigned long long id;
    if (!PyArg_ParseTuple(args, "iK:correlation_push", &kind, &id)) return NULL;
    if (stack_push(kind, (uint64_t)id) != CUPTI_SUCCESS) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_correlation_pop(PyObject *self, PyObject *args) {
    (void)self;
    int kind;
    if (!PyArg_ParseTuple(args, "i:correlation_pop", &kind)) return NULL;
    uint64_t id = 0;
    if (stack_pop(kind, &id) != CUPTI_SUCCESS) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong((unsigned long long)id);
}

static PyObject *py_correlation_reset(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    __atomic_add_fetch(&stack_generation, 1, __ATOMIC_RELAXED);
    Py_RETURN_NONE;
}

static PyObject *py_correlation_stack(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    IdStack *s = this_thread_stack();
    PyObject *ids = PyList_New((Py_ssize_t)s->depth);
    for (size_t i = 0; ids && i < s->depth; i++)
        PyList_SET_ITEM(ids, (Py_ssize_t)i, PyLong_FromUnsignedLongLong((unsigned long long)s->ids[i]));
    return ids;
}

/** Test hook: what is switched on (the subscription, the graph observer, the launch callbacks). */
static PyObject *py_callback_state(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return Py_BuildValue("{sOsOsO}", "subscribed", subscribed ? Py_True : Py_False, "graph_observer",
                         graph_on ? Py_True : Py_False, "launch_callbacks", launch_on ? Py_True : Py_False);
}

/** Test hook: one launch through the callback as CUPTI would call it, entry then exit. */
static PyObject *py_simulate_launch(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"api", "cbid", "correlation_id", "inner_driver_cbid", NULL};
    int api, inner = -1;
    unsigned int cbid, correlation;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iII|i:_simulate_launch", keywords, &api, &cbid, &correlation,
                                     &inner))
        return NULL;
    if (api != API_RUNTIME && api != API_DRIVER) {
        PyErr_Format(PyExc_ValueError, "_simulate_launch: api must be %d (runtime) or %d (driver); got %d", API_RUNTIME,
                     API_DRIVER, api);
        return NULL;
    }
    uint64_t shared = 0;
    CUpti_CallbackData data;
    memset(&data, 0, sizeof(data));
    data.correlationId = correlation;
    data.correlationData = &shared;
    data.callbackSite = CUPTI_API_ENTER;
    launch_callback((int8_t)api, (CUpti_CallbackId)cbid, &data);
    if (inner >= 0) { /* the driver call a runtime launch makes, with a correlation id of its own */
        uint64_t inner_shared = 0;
        CUpti_CallbackData driver = data;
        driver.correlationId = correlation + 1;
        driver.correlationData = &inner_shared;
        launch_callback(API_DRIVER, (CUpti_CallbackId)inner, &driver);
        driver.callbackSite = CUPTI_API_EXIT;
        launch_callback(API_DRIVER, (CUpti_CallbackId)inner, &driver);
    }
    data.callbackSite = CUPTI_API_EXIT;
    launch_callback((int8_t)api, (CUpti_CallbackId)cbid, &data);
    Py_RETURN_NONE;
}

/** Test hook: turn launch rows on or off without CUPTI (what launch_callbacks_start sets). */
static PyObject *py_launch_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"rows", "runtime_cbids", "driver_cbids", NULL};
    int rows;
    PyObject *runtime = NULL, *driver = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "p|OO:_launch_rows", keywords, &rows, &runtime, &driver))
        return NULL;
    PyObject *given[2] = {runtime, driver};
    for (int d = 0; d < 2; d++) {
        if (!given[d]) continue;
        CUpti_CallbackId *ids = NULL;
        size_t count = 0;
        if (!parse_cbids(given[d], d == 0 ? "runtime_cbids" : "driver_cbids", &ids, &count)) return NULL;
        memset(launch_cbid_on[d], 0, sizeof(launch_cbid_on[d]));
        for (size_t i = 0; i < count; i++)
            if (ids[i] < CBID_SLOTS) launch_cbid_on[d][ids[i]] = 1;
        free(ids);
    }
    pthread_mutex_lock(&launch_lock);
    launch_rows_on = rows;
    pthread_mutex_unlock(&launch_lock);
    Py_RETURN_NONE;
}

/** Every graph-node row since start (or the last take), as columns; the rows start empty again. */
static PyObject *py_graph_observer_take(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&graph_lock);
    Py_END_ALLOW_THREADS
    GraphRows taken = graph_rows;
    memset(&graph_rows, 0, sizeof(graph_rows));
    pthread_mutex_unlock(&graph_lock);
    PyObject *result = Py_BuildValue(
        "(NNNNNNN{sKsK})", column(taken.event, taken.rows, sizeof(int8_t)),
        column(taken.graph_id, taken.rows, sizeof(int64_t)), column(taken.node_id, taken.rows, sizeof(int64_t)),
        column(taken.external_id, taken.rows, sizeof(int64_t)),
        column(taken.original_graph_id, taken.rows, sizeof(int64_t)),
        column(taken.original_node_id, taken.rows, sizeof(int64_t)),
        column(taken.node_type, taken.rows, sizeof(int32_t)), "lost", (unsigned long long)taken.lost, "id_errors",
        (unsigned long long)taken.id_errors);
    graph_rows_clear(&taken);
    return result;
}

/** Test hook: append one graph-node row as the callback would, without CUPTI. */
static PyObject *py_simulate_graph_node(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"event", "graph_id", "node_id", "external_id", "original_graph_id",
                               "original_node_id", "node_type", NULL};
    int event, node_type = 0;
    unsigned int graph_id, original_graph_id = 0;
    unsigned long long node_id, original_node_id = 0;
    long long external_id = NO_EXTERNAL_ID;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iIK|LIKi:_simulate_graph_node", keywords, &event, &graph_id,
                                     &node_id, &external_id, &original_graph_id, &original_node_id, &node_type))
        return NULL;
    if (event != GRAPH_CREATED && event != GRAPH_CLONED) {
        PyErr_Format(PyExc_ValueError, "_simulate_graph_node: event must be %d (created) or %d (cloned); got %d",
                     GRAPH_CREATED, GRAPH_CLONED, event);
        return NULL;
    }
    pthread_mutex_lock(&graph_lock);
    push_graph_row(&graph_rows, (int8_t)event, graph_id, node_id, external_id, original_graph_id, original_node_id,
                   node_type);
    pthread_mutex_unlock(&graph_lock);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------- */
/* Python surface                                                                                 */

static void lock_live(void) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&live_lock);
    Py_END_ALLOW_THREADS
}

static PyObject *column(const void *data, size_t count, size_t element) {
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

/** Record sizes by kind: the defaults, updated from a {kind: bytes} mapping (0 removes a kind). */
static int parse_record_sizes(PyObject *mapping, size_t *sizes) {
    default_record_sizes(sizes);
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

static PyObject *py_record_sizes(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    size_t sizes[KIND_SLOTS];
    default_record_sizes(sizes);
    PyObject *result = PyDict_New();
    for (int kind = 0; result && kind < KIND_SLOTS; kind++) {
        if (!sizes[kind]) continue;
        PyObject *k = PyLong_FromLong(kind), *v = PyLong_FromSize_t(sizes[kind]);
        if (!k || !v || PyDict_SetItem(result, k, v) < 0) Py_CLEAR(result);
        Py_XDECREF(k); Py_XDECREF(v);
    }
    return result;
}

static PyObject *py_decode_buffer(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"buffer", "external_kind", "record_sizes", NULL};
    Py_buffer view;
    int external_kind;
    PyObject *sizes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*i|O:decode_buffer", keywords, &view, &external_kind, &sizes))
        return NULL;
    Collector c;
    memset(&c, 0, sizeof(c));
    c.external_kind = external_kind;
    PyObject *result = NULL;
    if (parse_record_sizes(sizes, c.record_size)) {
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

static PyObject *load_error(const char *detail) {
    PyErr_Format(PyExc_OSError,
                 "cannot use libcupti (%s): import torch with CUDA 13 (it loads " CUPTI_SONAME
                 ") or install nvidia-cuda-cupti 13.x, or pass decoder='python'",
                 detail ? detail : "unknown error");
    return NULL;
}

/** Resolve the three CUPTI functions; return the library file they come from. */
static PyObject *py_load(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"path", NULL};
    const char *path = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z:load", keywords, &path)) return NULL;
    if (!cupti_library) {
        /* the copy already in the process; else the wheel's (what torch and cupti-python load, so
           they find ours instead of a second copy); else whatever the loader finds by soname */
        void *handle = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_NOLOAD);
        if (!handle && path) handle = dlopen(path, RTLD_NOW);
        if (!handle) handle = dlopen(CUPTI_SONAME, RTLD_NOW);
        if (!handle) return load_error(dlerror());
        RegisterFn reg = (RegisterFn)dlsym(handle, "cuptiActivityRegisterCallbacks");
        NextRecordFn next = (NextRecordFn)dlsym(handle, "cuptiActivityGetNextRecord");
        ResultStringFn text = (ResultStringFn)dlsym(handle, "cuptiGetResultString");
        if (!reg || !next) { dlclose(handle); return load_error("cuptiActivityRegisterCallbacks not found"); }
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
        cupti_library = handle;
    }
    Dl_info info;
    if (dladdr((void *)p_register, &info) && info.dli_fname) return PyUnicode_DecodeFSDefault(info.dli_fname);
    return PyUnicode_FromString(CUPTI_SONAME);
}

static PyObject *py_register(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"external_kind", "record_sizes", NULL};
    int external_kind;
    PyObject *sizes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|O:register", keywords, &external_kind, &sizes)) return NULL;
    size_t parsed[KIND_SLOTS];
    if (!parse_record_sizes(sizes, parsed)) return NULL;
    if (!p_register) {
        PyErr_SetString(PyExc_RuntimeError, "libcupti is not loaded: call _cupti_native.load() first");
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

static PyObject *py_take(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    lock_live();
    Collector taken = live;
    memset(&live, 0, sizeof(live));
    live.external_kind = taken.external_kind;
    memcpy(live.record_size, taken.record_size, sizeof(live.record_size));
    pthread_mutex_unlock(&live_lock);
    take_launch_rows(&taken);
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
    static char *keywords[] = {"external_kind", "record_sizes", NULL};
    int external_kind;
    PyObject *sizes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|O:_reset", keywords, &external_kind, &sizes)) return NULL;
    size_t parsed[KIND_SLOTS];
    if (!parse_record_sizes(sizes, parsed)) return NULL;
    lock_live();
    collector_clear(&live);
    live.external_kind = external_kind;
    memcpy(live.record_size, parsed, sizeof(parsed));
    live_walk_cupti = 0;
    buffers_requested = buffers_completed = foreign_buffers = 0;
    pool_hits = pool_misses = 0;
    pthread_mutex_unlock(&live_lock);
    pthread_mutex_lock(&launch_lock);
    launch_rows_clear(&launch_rows);
    launch_generation++;
    pthread_mutex_unlock(&launch_lock);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"load", (PyCFunction)(void (*)(void))py_load, METH_VARARGS | METH_KEYWORDS,
     "Resolve libcupti's functions from the copy in the process; return its path."},
    {"register", (PyCFunction)(void (*)(void))py_register, METH_VARARGS | METH_KEYWORDS,
     "Register this module's CUPTI buffer callbacks and forget older records."},
    {"take", py_take, METH_NOARGS, "Every record delivered since register(), as raw columns; resets them."},
    {"decode_buffer", (PyCFunction)(void (*)(void))py_decode_buffer, METH_VARARGS | METH_KEYWORDS,
     "Decode one activity buffer (replay, no CUPTI needed) into raw columns."},
    {"record_sizes", py_record_sizes, METH_NOARGS, "Compiled record sizes by activity kind."},
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
    {"graph_observer_start", (PyCFunction)(void (*)(void))py_graph_observer_start, METH_VARARGS | METH_KEYWORDS,
     "Subscribe to CUPTI's graph-node resource callbacks (load() first); forget older graph rows."},
    {"graph_observer_stop", py_graph_observer_stop, METH_NOARGS, "Unsubscribe the graph observer (idempotent)."},
    {"graph_observer_take", py_graph_observer_take, METH_NOARGS,
     "Graph-node rows recorded since start or the last take, as raw columns; they start empty again."},
    {"_simulate_graph_node", (PyCFunction)(void (*)(void))py_simulate_graph_node, METH_VARARGS | METH_KEYWORDS,
     "Test hook: append one graph-node row as the resource callback would."},
    {"callbacks_unavailable", py_callbacks_unavailable, METH_NOARGS,
     "Why CUPTI's callbacks cannot be subscribed to (a str), or None."},
    {"correlation_functions", py_correlation_functions, METH_NOARGS,
     "(push, pop): addresses of this module's per-thread correlation stack, with the signatures of "
     "cuptiActivityPush/PopExternalCorrelationId."},
    {"correlation_push", py_correlation_push, METH_VARARGS, "Push an id on this thread's correlation stack."},
    {"correlation_pop", py_correlation_pop, METH_VARARGS, "Pop this thread's correlation stack; the id, or None."},
    {"correlation_reset", py_correlation_reset, METH_NOARGS, "Empty every thread's correlation stack."},
    {"_correlation_stack", py_correlation_stack, METH_NOARGS, "Test hook: this thread's stack, bottom first."},
    {"launch_callbacks_start", (PyCFunction)(void (*)(void))py_launch_callbacks_start, METH_VARARGS | METH_KEYWORDS,
     "Enable the launch API callbacks (load() first): each call is linked to the top of its thread's stack."},
    {"launch_callbacks_stop", py_launch_callbacks_stop, METH_NOARGS, "Disable the launch callbacks (idempotent)."},
    {"_simulate_launch", (PyCFunction)(void (*)(void))py_simulate_launch, METH_VARARGS | METH_KEYWORDS,
     "Test hook: one launch through the launch callback, entry then exit, on this thread."},
    {"_callback_state", py_callback_state, METH_NOARGS,
     "Test hook: whether the CUPTI subscription, the graph observer and the launch callbacks are on."},
    {"_launch_rows", (PyCFunction)(void (*)(void))py_launch_rows, METH_VARARGS | METH_KEYWORDS,
     "Test hook: record launch rows (True) or only links, for these callback ids, without CUPTI."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cupti_native", "CUPTI activity buffers decoded into columns (native_shims/).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cupti_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "BUFFER_BYTES", (long)BUFFER_BYTES) < 0
        || PyModule_AddIntConstant(m, "CUPTI_API_VERSION", CUPTI_API_VERSION) < 0
        || PyModule_AddStringConstant(m, "CUPTI_SONAME", CUPTI_SONAME) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    pthread_mutex_lock(&live_lock);
    if (!live.record_size[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]) default_record_sizes(live.record_size);
    pthread_mutex_unlock(&live_lock);
    return m;
}
