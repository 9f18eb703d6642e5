// The aten-op tracer: a thread-local at::RecordFunction callback that records the ops a Python
// TorchDispatchMode would see (the outermost dispatched op that is not a CompositeImplicitAutograd
// decomposition; ops run inside it are not seen), gives each an op id, pushes that id as a CUPTI
// external correlation id around the op, and stamps its row with the thread's innermost module and
// functional call. Nothing here calls into Python.

#include "trace.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <cstring>

namespace aitune {
namespace {

constexpr int32_t kHidden = -1;  // a name the dispatch mode would not see (a decomposition)

struct Named {
  int32_t id;        // interned name id, or kHidden
  std::string name;  // checked on every cache hit
};

// RecordFunction name pointer -> what it names; guarded by trace.op_lock
std::unordered_map<const char*, Named> name_cache;
at::CallbackHandle handle = 0;

// Called with trace.op_lock held. Cached by name pointer (a dispatcher op's name lives as long as
// its schema); the name is compared on every hit, as a freed name's address can be reused.
int32_t name_id(const at::RecordFunction& fn) {
  const char* key = fn.name();
  auto found = name_cache.find(key);
  if (found != name_cache.end()) {
    if (std::strcmp(found->second.name.c_str(), key) == 0) return found->second.id;
    name_cache.erase(found);
  }
  auto op_name = fn.operator_name();
  // a RecordFunction named by a string of its own is no dispatcher op: never seen, never cached
  if (!op_name) return kHidden;
  auto op = c10::Dispatcher::singleton().findOp(*op_name);
  if (op && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
    name_cache.emplace(key, Named{kHidden, key});
    return kHidden;
  }
  int32_t id = trace.op_names.id(key);
  name_cache.emplace(key, Named{id, key});
  return id;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  ThreadState& t = thread_state();
  if (t.op_depth > 0) {
    t.open_ops.push_back(-1);
    return nullptr;
  }
  int64_t op_id;
  {
    std::lock_guard<std::mutex> guard(trace.op_lock);
    int32_t id = name_id(fn);
    if (id == kHidden) {
      t.open_ops.push_back(-1);
      return nullptr;
    }
    OpColumns& c = trace.ops;
    op_id = int64_t(c.name.size());
    c.name.push_back(id);
    c.module.push_back(t.modules.back());
    c.call.push_back(t.calls.back());
    c.thread.push_back(t.thread);
    c.end.push_back(0);
    c.start.push_back(now_ns());
  }
  t.open_ops.push_back(op_id);
  ++t.op_depth;
  if (trace.push) trace.push(trace.kind, uint64_t(op_id));
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  ThreadState& t = thread_state();
  if (t.open_ops.empty()) return;  // started before this pass
  int64_t op_id = t.open_ops.back();
  t.open_ops.pop_back();
  if (op_id < 0) return;
  --t.op_depth;
  if (trace.pop) {
    uint64_t last = 0;
    trace.pop(trace.kind, &last);
  }
  int64_t end = now_ns();
  std::lock_guard<std::mutex> guard(trace.op_lock);
  if (size_t(op_id) < trace.ops.end.size()) trace.ops.end[size_t(op_id)] = end;
}

}  // namespace

bool start_op_tracer(PyObject** error) {
  try {
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                            .needsInputs(false)
                                            .needsOutputs(false)
                                            .needsIds(false)
                                            .scopes({at::RecordScope::FUNCTION}));
  } catch (const std::exception& e) {
    *error = PyUnicode_FromString(e.what());
    return false;
  }
  return true;
}

void stop_op_tracer() {
  if (handle != 0) {
    at::removeCallback(handle);
    handle = 0;
  }
}

}  // namespace aitune
