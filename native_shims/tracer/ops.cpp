// The aten-op tracer: a thread-local at::RecordFunction callback that records the ops a Python
// TorchDispatchMode would see (the outermost dispatched op that is not a CompositeImplicitAutograd
// decomposition; ops run inside it are not seen), gives each an op id, pushes that id as a CUPTI
// external correlation id around the op, and stamps its row with the thread's innermost module and
// functional call. View ops (torch's OpOverload.is_view rule: an aliased argument, none written)
// only compute metadata and never launch, so their row is recorded but no id is pushed for them.
// For tracing/links.py it also notes the autograd nodes each op created (torch's per-thread sequence
// numbers before and after it), the node autograd's engine evaluates while an op runs in backward
// (torch::autograd::get_current_node, what torch._C._current_autograd_node reads), and torch.optim's
// "Optimizer.*" profiling scopes (USER_SCOPE).
// Nothing here calls into Python.

#include "trace.h"

#include <ATen/SequenceNumber.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>

#include <cstring>

namespace aitune {
namespace {

constexpr int32_t kHidden = -1;  // a name the dispatch mode would not see (a decomposition)

struct Named {
  int32_t id;        // interned name id, or kHidden
  std::string name;  // checked on every cache hit
  bool push;         // false for view ops: they launch nothing, so no correlation id is pushed
};

// torch's OpOverload.is_view: some argument aliases an output, and no aliased argument is written
bool is_view(const c10::OperatorHandle& op) {
  if (!op.hasSchema()) return false;
  bool aliased = false;
  for (const c10::Argument& argument : op.schema().arguments()) {
    const c10::AliasInfo* alias = argument.alias_info();
    if (alias == nullptr) continue;
    if (alias->isWrite()) return false;
    aliased = true;
  }
  return aliased;
}

// RecordFunction name pointer -> what it names; guarded by trace.op_lock
std::unordered_map<const char*, Named> name_cache;
at::CallbackHandle handle = 0;

const Named kUnseen{kHidden, "", false};

// Called with trace.op_lock held. Cached by name pointer (a dispatcher op's name lives as long as
// its schema); the name is compared on every hit, as a freed name's address can be reused.
const Named& named(const at::RecordFunction& fn) {
  const char* key = fn.name();
  auto found = name_cache.find(key);
  if (found != name_cache.end()) {
    if (std::strcmp(found->second.name.c_str(), key) == 0) return found->second;
    name_cache.erase(found);
  }
  auto op_name = fn.operator_name();
  // a RecordFunction named by a string of its own is no dispatcher op: never seen, never cached
  if (!op_name) return kUnseen;
  auto op = c10::Dispatcher::singleton().findOp(*op_name);
  if (op && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
    return name_cache.emplace(key, Named{kHidden, key, false}).first->second;
  }
  int32_t id = trace.op_names.id(key);
  return name_cache.emplace(key, Named{id, key, !(op && is_view(*op))}).first->second;
}

constexpr char kOptimizerScope[] = "Optimizer.";  // schema.OPTIMIZER_SCOPE_PREFIX

void start_user_scope(ThreadState& t, const at::RecordFunction& fn) {
  int64_t row = -1;
  const char* name = fn.name();
  if (std::strncmp(name, kOptimizerScope, sizeof(kOptimizerScope) - 1) == 0) {
    std::lock_guard<std::mutex> guard(trace.op_lock);
    ScopeColumns& c = trace.scopes;
    row = int64_t(c.name.size());
    c.name.emplace_back(name);
    c.thread.push_back(t.thread);
    c.start.push_back(now_ns());
    c.end.push_back(0);
  }
  t.user_scopes.push_back(row);
}

void end_user_scope(ThreadState& t) {
  if (t.user_scopes.empty()) return;  // started before this pass
  int64_t row = t.user_scopes.back();
  t.user_scopes.pop_back();
  if (row < 0) return;
  int64_t end = now_ns();
  std::lock_guard<std::mutex> guard(trace.op_lock);
  if (size_t(row) < trace.scopes.end.size()) trace.scopes.end[size_t(row)] = end;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  ThreadState& t = thread_state();
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    start_user_scope(t, fn);
    return nullptr;
  }
  if (t.op_depth > 0) {
    t.open_ops.push_back(Open{-1, false});
    return nullptr;
  }
  int64_t op_id;
  bool push;
  // set only while autograd's engine evaluates a node on this thread (the whole evaluate_function: the
  // node's apply and the reduction of its gradients to their inputs' shapes)
  auto node = torch::autograd::get_current_node();
  {
    std::lock_guard<std::mutex> guard(trace.op_lock);
    const Named& name = named(fn);
    if (name.id == kHidden) {
      t.open_ops.push_back(Open{-1, false});
      return nullptr;
    }
    push = name.push && trace.push != nullptr;
    OpColumns& c = trace.ops;
    op_id = int64_t(c.name.size());
    c.name.push_back(name.id);
    c.module.push_back(t.modules.back());
    c.call.push_back(t.calls.back());
    c.thread.push_back(t.thread);
    c.end.push_back(0);
    c.start.push_back(now_ns());
    if (node) {
      uint64_t seq = node->sequence_nr();
      trace.backward.op.push_back(op_id);
      trace.backward.seq.push_back(seq == UINT64_MAX ? -1 : int64_t(seq));  // AccumulateGrad's: none
      trace.backward.forward_thread.push_back(node->thread_id());
    }
  }
  t.open_ops.push_back(Open{op_id, push});
  ++t.op_depth;
  if (push) {
    trace.push(trace.kind, uint64_t(op_id));
    ++trace.ops_pushed;
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState& t = thread_state();
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    end_user_scope(t);
    return;
  }
  if (t.open_ops.empty()) return;  // started before this pass
  Open open = t.open_ops.back();
  t.open_ops.pop_back();
  int64_t op_id = open.op_id;
  if (op_id < 0) return;
  --t.op_depth;
  if (open.pushed) {
    uint64_t last = 0;
    trace.pop(trace.kind, &last);
  }
  int64_t end = now_ns();
  // the nodes created since the previous op ended: by this op (its autograd kernel), or just before it
  // (a custom autograd.Function's node, created before its forward runs)
  int64_t next_seq = int64_t(at::sequence_number::peek());
  std::lock_guard<std::mutex> guard(trace.op_lock);
  if (size_t(op_id) < trace.ops.end.size()) trace.ops.end[size_t(op_id)] = end;
  if (next_seq > t.next_seq) {
    NodeColumns& n = trace.nodes;
    n.op.push_back(op_id);
    n.thread.push_back(t.thread);
    n.first.push_back(t.next_seq);
    n.end.push_back(next_seq);
    t.next_seq = next_seq;
  }
}

}  // namespace

void autograd_position(uint64_t* record_function_id, int64_t* next_seq) {
  *record_function_id = at::RecordFunction::currentThreadId();
  *next_seq = int64_t(at::sequence_number::peek());
}

bool start_op_tracer(PyObject** error) {
  try {
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                            .needsInputs(false)
                                            .needsOutputs(false)
                                            .needsIds(false)
                                            .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
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
