/*
 * aitune_dispatch.collection._cupti_native, its CUPTI callbacks: one subscription (cuptiSubscribe) for
 * the graph observer (resource callbacks: CUDA graph nodes created during captures, and their clones)
 * and the launch callbacks (runtime / driver API callbacks on the launch, copy and set calls, each
 * linked to the id on top of the launching thread's stack), and that per-thread id stack, which the
 * tracer pushes its op and scope ids on with launch correlation (docs/design.md, "Correlation: what
 * CUPTI needs"). Nothing here runs Python in a CUPTI callback; the Python functions are added to the
 * module by cupti_decoder.c (callback_methods).
 */
#include "cupti_shared.h"

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


/** Subscribe unless subscribed; 0 with a Python error set on failure. */
static int subscribe_once(void) {
    if (subscribed) return 1;
    if (!cuda_driver_present(1)) {
        PyErr_SetString(PyExc_RuntimeError, NO_DRIVER);
        return 0;
    }
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

/** CUPTI's clock, or the host's (the same CLOCK_MONOTONIC on Linux) where no driver is loaded: a
 * simulated launch (no driver) must not call into libcupti. */
static uint64_t timestamp_now(void) {
    uint64_t stamp = 0;
    if (!p_timestamp || !cuda_driver_present(0) || p_timestamp(&stamp) != CUPTI_SUCCESS) {
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

/** The launch callbacks' rows so far, handed over (the caller frees them with launch_rows_free); they start
 * empty again, and an exit still in flight finds no row. */
LaunchRows launch_rows_take(void) {
    pthread_mutex_lock(&launch_lock);
    LaunchRows taken = launch_rows;
    memset(&launch_rows, 0, sizeof(launch_rows));
    launch_generation++;
    pthread_mutex_unlock(&launch_lock);
    return taken;
}

void launch_rows_free(LaunchRows *rows) { launch_rows_clear(rows); }

/** Forget every launch row (the decoder's _reset). */
void launch_rows_reset(void) {
    pthread_mutex_lock(&launch_lock);
    launch_rows_clear(&launch_rows);
    launch_generation++;
    pthread_mutex_unlock(&launch_lock);
}

/* -- the correlation stack and the launch callback, from Python ------------------------------- */

/** Why the launch callbacks cannot be had (as a str), or None: subscribes and unsubscribes to find out. */
static PyObject *py_callbacks_unavailable(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    if (!callbacks_resolved())
        return PyUnicode_FromString("this libcupti lacks the callback functions (cuptiSubscribe, cuptiEnableCallback)");
    if (subscribed) Py_RETURN_NONE;
    if (!cuda_driver_present(1)) return PyUnicode_FromString(NO_DRIVER);
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

PyMethodDef callback_methods[] = {
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
