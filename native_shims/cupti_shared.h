/*
 * What the two files of aitune_dispatch.collection._cupti_native share: cupti_decoder.c (activity
 * buffers decoded into columns, libcupti resolved, the module) and cupti_callbacks.c (the one CUPTI
 * subscription: the graph observer, the per-thread id stack and the launch callbacks).
 * libcupti is never linked: the decoder's load() resolves the function pointers declared here.
 */
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_version.h>

/* records.API_RUNTIME / API_DRIVER */
enum { API_RUNTIME = 0, API_DRIVER = 1 };

typedef __typeof__(&cuptiGetResultString) ResultStringFn;
typedef __typeof__(&cuptiSubscribe) SubscribeFn;
typedef __typeof__(&cuptiUnsubscribe) UnsubscribeFn;
typedef __typeof__(&cuptiEnableCallback) EnableCallbackFn;
typedef __typeof__(&cuptiGetGraphNodeId) GraphNodeIdFn;
typedef __typeof__(&cuptiGetGraphId) GraphIdFn;
typedef __typeof__(&cuptiActivityPushExternalCorrelationId) PushFn;
typedef __typeof__(&cuptiActivityPopExternalCorrelationId) PopFn;
typedef __typeof__(&cuptiGetTimestamp) TimestampFn;

/* resolved by load() (cupti_decoder.c); NULL where this libcupti lacks them */
extern ResultStringFn p_result_string;
extern SubscribeFn p_subscribe;
extern UnsubscribeFn p_unsubscribe;
extern EnableCallbackFn p_enable_callback;
extern GraphNodeIdFn p_graph_node_id;
extern GraphIdFn p_graph_id;
extern PushFn p_push;
extern PopFn p_pop;
extern TimestampFn p_timestamp;

/** Whether the CUDA driver (libcuda.so.1) is in this process, loading it first where `may_load`.
 * Every libcupti call needs it: without one libcupti 13.0 and 13.5 answer an error, but 13.2.86
 * recurses inside its error path until the stack overflows (SIGSEGV), so no CUPTI function may be
 * called before this says yes. A yes is kept; may_load = 0 maps nothing (the launch callback's clock). */
int cuda_driver_present(int may_load);
/** The message of the error raised where cuda_driver_present() says no. */
extern const char NO_DRIVER[];

/** Grow one array to hold `cap` elements; 0 on failure (the old array stays valid). */
int grow(void **array, size_t element, size_t cap);
/** `count` elements of `element` bytes as one bytes object (numpy wraps it without a copy per row). */
PyObject *column(const void *data, size_t count, size_t element);
/** Text of a CUPTI status, for error messages. */
const char *status_text(CUptiResult status);

/* -- cupti_callbacks.c ------------------------------------------------------------------------- */

/** What the launch callbacks recorded: links (correlation id -> id on top of the stack) and API calls. */
typedef struct {
    int64_t *link_correlation_id, *link_id;
    size_t links, link_cap;
    int64_t *correlation_id, *start_ns, *end_ns, *thread;
    int8_t *api;
    int32_t *cbid;
    size_t calls, call_cap;
    uint64_t lost;
} LaunchRows;

/** The launch rows so far, handed over (free them with launch_rows_free); they start empty again. */
LaunchRows launch_rows_take(void);
void launch_rows_free(LaunchRows *rows);
/** Forget every launch row. */
void launch_rows_reset(void);
/** The graph observer's, the id stack's and the launch callbacks' Python functions. */
extern PyMethodDef callback_methods[];
