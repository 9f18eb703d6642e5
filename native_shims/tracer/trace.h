// Shared state of aitune_dispatch.tracing._tracer: the columns one recorded pass appends to, and the
// per-thread module / functional-call stacks that every row is stamped with.
//
// Writers: the module hooks and the function mode run with the GIL held; the RecordFunction op
// callback may run without it, so op rows are appended under `op_lock` and everything else under
// the GIL. Each thread's stacks are touched by that thread only.

#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace aitune {

constexpr int64_t kNoModule = -1;  // schema.NO_MODULE
constexpr int64_t kNoCall = -1;    // schema.NO_CALL
constexpr int64_t kNoSample = -1;  // a call whose inputs were not sampled
// one CUPTI external-correlation kind carries op ids (below) and scope contexts (at and above)
constexpr uint64_t kScopeBase = uint64_t(1) << 62;

// the activity source's entry points (cuptiActivityPush/PopExternalCorrelationId's signatures)
using PushFn = int (*)(int kind, uint64_t id);
using PopFn = int (*)(int kind, uint64_t* last_id);

int64_t now_ns();  // CLOCK_MONOTONIC, i.e. time.perf_counter_ns() on Linux

struct OpColumns {
  std::vector<int32_t> name;
  std::vector<int64_t> module, call, thread, start, end;
};

struct CallColumns {
  std::vector<int32_t> name;
  std::vector<int64_t> parent, module, start, end, thread, sample;
};

struct ModuleCallColumns {
  std::vector<int64_t> module, start, end, thread;
};

struct ContextColumns {
  std::vector<int64_t> module, call;
};

// What tracing/links.py links backward and optimizer ops with (schemas AUTOGRAD_NODES, BACKWARD_OPS,
// USER_SCOPES): the autograd nodes each op created, the node each backward op ran in, optimizer scopes.
struct NodeColumns {
  std::vector<int64_t> op, thread, first, end;
};

struct BackwardColumns {
  std::vector<int64_t> op, seq;
  std::vector<uint64_t> forward_thread;  // RecordFunction's thread id; take() maps it to a trace thread
};

struct ScopeColumns {
  std::vector<std::string> name;
  std::vector<int64_t> thread, start, end;
};

// One started RecordFunction on a thread: the op id it recorded (-1: none) and whether it pushed it.
struct Open {
  int64_t op_id;
  bool pushed;
};

// A thread that reported a traced event (tracing/contract.py ThreadInfo).
struct ThreadInfo {
  std::string name;
  bool traced = true;  // false: running before the pass began, so not the profiled function's
  int64_t skipped_forwards = 0;
  unsigned long native_id = 0;  // the OS thread id, as threading.get_native_id() reports it
  uint64_t record_function_id = 0;  // at::RecordFunction::currentThreadId(), what a node's forward thread names
};

struct ThreadState {
  uint64_t generation = 0;
  int64_t thread = -1;
  bool traced = true;
  bool named = false;
  // bottom entries are sentinels, as in tracing/buffers.py
  std::vector<int64_t> modules{kNoModule};
  std::vector<int64_t> module_rows{-1};
  std::vector<int64_t> calls{kNoCall};
  std::vector<uint8_t> call_is_functional{0};  // parallel to calls
  int functional_depth = 0;                    // open torch.nn.functional calls (not torch-level ones)
  std::vector<PyObject*> reentered;            // functionals running as re-armed copies (borrowed)
  std::vector<int32_t> hooked;                 // name ids of the hooked functionals whose calls are open
  int op_depth = 0;                            // recorded ops open on this thread
  std::vector<Open> open_ops;                  // one entry per started RecordFunction (ops.cpp)
  int64_t next_seq = 0;                        // the autograd sequence number after the last node claimed
  std::vector<int64_t> user_scopes;            // per started USER_SCOPE: its row in trace.scopes, or -1
};

// Interned strings -> small ids, so that rows hold integers only.
struct Names {
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> ids;
  int32_t id(const std::string& name) {
    auto found = ids.find(name);
    if (found != ids.end()) return found->second;
    int32_t next = int32_t(names.size());
    names.push_back(name);
    ids.emplace(name, next);
    return next;
  }
};

struct Trace {
  std::mutex op_lock;
  OpColumns ops;
  Names op_names;
  CallColumns calls;
  ModuleCallColumns module_calls;
  ContextColumns contexts;
  NodeColumns nodes;          // guarded by op_lock, as ops
  BackwardColumns backward;   // guarded by op_lock
  ScopeColumns scopes;        // guarded by op_lock
  Names function_names;
  std::unordered_map<PyObject*, int64_t> module_ids;  // strong references while configured
  bool running = false;
  uint64_t generation = 0;  // thread states of an earlier pass are reset on first use
  std::atomic<int64_t> threads{0};
  std::vector<ThreadInfo> thread_infos;               // by index; guarded by op_lock
  std::unordered_set<unsigned long> running_before;  // thread idents running when profile() began (given by begin_pass)
  int kind = -1;  // CUPTI external-correlation kind, or -1: nothing is pushed (CPU)
  PushFn push = nullptr;
  PopFn pop = nullptr;
  uint64_t scopes_pushed = 0;
  uint64_t ops_pushed = 0;
};

extern Trace trace;
extern thread_local ThreadState tls;

// The calling thread's OS id (gettid on Linux), the value threading.get_native_id() returns; no GIL needed.
inline unsigned long native_thread_id() {
#ifdef PY_HAVE_THREAD_NATIVE_ID
  return PyThread_get_thread_native_id();
#else
  return 0;
#endif
}

// this thread's RecordFunction id and next autograd sequence number (ops.cpp: no ATen header here)
void autograd_position(uint64_t* record_function_id, int64_t* next_seq);

inline ThreadState& thread_state() {
  ThreadState& t = tls;
  if (t.generation != trace.generation) {
    t = ThreadState();
    t.generation = trace.generation;
    std::lock_guard<std::mutex> guard(trace.op_lock);
    t.thread = trace.threads.fetch_add(1);
    t.traced = trace.running_before.count(PyThread_get_thread_ident()) == 0;
    trace.thread_infos.emplace_back();
    trace.thread_infos.back().traced = t.traced;
    trace.thread_infos.back().native_id = native_thread_id();
    autograd_position(&trace.thread_infos.back().record_function_id, &t.next_seq);
  }
  return t;
}

// -- scopes (scopes.cpp): module forwards and functional calls, called with the GIL held ---------
void enter_module(ThreadState& t, int64_t module_id);
void exit_module(ThreadState& t, int64_t module_id);
int64_t begin_call(ThreadState& t, int32_t name_id, int64_t sample, bool functional);
void end_call(ThreadState& t, int64_t call_id);

// -- op tracer (ops.cpp) -------------------------------------------------------------------------
bool start_op_tracer(PyObject** error);  // registers the RecordFunction callback
void stop_op_tracer();

// -- samples (samples.cpp) -----------------------------------------------------------------------
bool samples_configure(PyObject* python_key, PyObject* singletons);  // Python fallback keyer; (dtype, layout, memory_format) types
int64_t samples_observe(int32_t name_id, PyObject* args, PyObject* kwargs);  // -2 on error
PyObject* samples_take();  // {name_id: [(count, (args, kwargs)), ...]} in order of first call
void samples_clear();
PyObject* py_sample_key_bytes(PyObject*, PyObject* value);  // exposed for tests

// -- function mode (function_mode.cpp) -----------------------------------------------------------
// What start() hands the function mode, by name (borrowed references; configure takes its own).
struct FunctionModeSettings {
  PyObject* functions = nullptr;           // {functional: name}
  PyObject* sample_names = nullptr;        // frozenset of function_names, or None: every functional
  bool all_functions = false;              // torch-level API calls count as calls (functions="all")
  PyObject* rearmed_copy = nullptr;        // rearmed_copy(func) -> gate-free copy or None
  PyObject* api_name = nullptr;            // api_name(func) -> "torch.addmm" or None
  PyObject* push_mode = nullptr;           // torch._C._push_on_torch_function_stack
  PyObject* pop_mode = nullptr;            // torch._C._pop_torch_function_stack
  PyObject* routing_mode_below = nullptr;  // routing_mode_below() -> whether a mode below ours wants the call
  bool hook_objects = false;               // functions' objects record their own calls (no mode is pushed)
  PyObject* outermost_only = nullptr;      // frozenset of hooked functions not recorded inside another call
};
bool function_mode_ready(PyObject* module);
bool function_mode_configure(const FunctionModeSettings& settings);
void function_mode_clear();    // also removes the function-object hooks
bool function_mode_install_hooks(PyObject* outermost_only);  // hooks the configured functions (settings.hook_objects)

// -- function-object hooks (function_hooks.cpp) --------------------------------------------------
const char* function_hooks_unsupported();  // nullptr where this CPython can be hooked, else why not
// hooks every key of ids ({function object: name id}); sampled is by name id
bool function_hooks_install(PyObject* ids, const std::vector<uint8_t>& sampled, PyObject* outermost_only);
void function_hooks_remove();  // every slot that holds our trampoline gets its original back
Py_ssize_t function_hooks_installed();
bool function_hooked(PyObject* func);

}  // namespace aitune
