// Module forwards and functional calls: rows, per-thread stacks, and the scope ids pushed as CUPTI
// external correlation ids so that a launch made outside any aten op still names its context.
// The semantics are those of tracing/buffers.py (TraceBuffers), row for row.

#include "trace.h"

#include <time.h>

namespace aitune {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

namespace {

void enter_scope(ThreadState& t) {
  if (trace.push == nullptr) return;
  trace.contexts.module.push_back(t.modules.back());
  trace.contexts.call.push_back(t.calls.back());
  trace.push(trace.kind, kScopeBase + uint64_t(trace.contexts.module.size() - 1));
  ++trace.scopes_pushed;
}

void exit_scopes(size_t count) {
  if (trace.pop == nullptr) return;
  uint64_t last = 0;
  for (size_t i = 0; i < count; ++i) trace.pop(trace.kind, &last);
}

}  // namespace

void enter_module(ThreadState& t, int64_t module_id) {
  if (!t.traced) {  // a thread that is not the profiled function's: counted, not recorded
    ++trace.thread_infos[size_t(t.thread)].skipped_forwards;
    return;
  }
  ModuleCallColumns& c = trace.module_calls;
  t.modules.push_back(module_id);
  t.module_rows.push_back(int64_t(c.module.size()));
  c.module.push_back(module_id);
  c.start.push_back(now_ns());
  c.end.push_back(0);
  c.thread.push_back(t.thread);
  enter_scope(t);
}

void exit_module(ThreadState& t, int64_t module_id) {
  if (!t.traced) return;
  // pops module_id and anything an exception left above it
  for (size_t pos = t.modules.size() - 1; pos > 0; --pos) {
    if (t.modules[pos] != module_id) continue;
    int64_t now = now_ns();
    for (size_t i = pos; i < t.module_rows.size(); ++i) trace.module_calls.end[size_t(t.module_rows[i])] = now;
    exit_scopes(t.modules.size() - pos);
    t.modules.resize(pos);
    t.module_rows.resize(pos);
    return;
  }
}

int64_t begin_call(ThreadState& t, int32_t name_id, int64_t sample, bool functional) {
  CallColumns& c = trace.calls;
  int64_t call_id = int64_t(c.name.size());
  c.name.push_back(name_id);
  c.parent.push_back(t.calls.back());
  c.module.push_back(t.modules.back());
  c.start.push_back(now_ns());
  c.end.push_back(0);
  c.thread.push_back(t.thread);
  c.sample.push_back(sample);
  t.calls.push_back(call_id);
  t.call_is_functional.push_back(functional ? 1 : 0);
  t.functional_depth += functional ? 1 : 0;
  enter_scope(t);
  return call_id;
}

void end_call(ThreadState& t, int64_t call_id) {
  trace.calls.end[size_t(call_id)] = now_ns();
  for (size_t pos = t.calls.size() - 1; pos > 0; --pos) {
    if (t.calls[pos] != call_id) continue;
    for (size_t i = pos; i < t.calls.size(); ++i) t.functional_depth -= t.call_is_functional[i];
    exit_scopes(t.calls.size() - pos);
    t.calls.resize(pos);
    t.call_is_functional.resize(pos);
    return;
  }
}

}  // namespace aitune
