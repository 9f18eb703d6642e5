// aitune_dispatch.tracing._tracer: the compiled tracing backend (tracing/native.py drives it).
//
// One recorded pass: start() takes the hierarchy's modules, the function-mode configuration and
// the CUPTI correlation kind, all by keyword (tracing/native.py NativePass), resets every column
// and registers the RecordFunction op callback;
// the module hooks call enter_module / exit_module; FunctionModeBase handles torch functions;
// stop() removes the callback; take() hands every column over as bytes plus the collected samples.
// Nothing is linked for correlation: push/pop are the C functions the activity source hands start()
// (CorrelationTarget.correlation_functions: libcupti's, resolved in Python from the copy torch loaded).

#include "trace.h"

namespace aitune {

Trace trace;
thread_local ThreadState tls;

namespace {

// kind kLogPushes (tests without a GPU): pushes and pops are logged instead of sent to CUPTI
constexpr int kLogPushes = -2;
constexpr int kNoCorrelation = -1;  // nothing is pushed (the CPU activity source)
std::vector<int64_t> push_log;  // pushed ids, and -1 for each pop
int log_push(int, uint64_t id) {
  push_log.push_back(int64_t(id));
  return 0;
}
int log_pop(int, uint64_t*) {
  push_log.push_back(-1);
  return 0;
}

// The calling thread's state, its name noted on first use (GIL held).
ThreadState& named_thread_state() {
  ThreadState& t = thread_state();
  if (!t.named) {
    t.named = true;
    PyObject* threading = PyImport_ImportModule("threading");
    PyObject* current = threading ? PyObject_CallMethod(threading, "current_thread", nullptr) : nullptr;
    PyObject* name = current ? PyObject_GetAttrString(current, "name") : nullptr;
    const char* text = name ? PyUnicode_AsUTF8(name) : nullptr;
    if (text != nullptr) {
      std::lock_guard<std::mutex> guard(trace.op_lock);
      trace.thread_infos[size_t(t.thread)].name = text;
    }
    Py_XDECREF(name);
    Py_XDECREF(current);
    Py_XDECREF(threading);
    PyErr_Clear();  // a missing name is no reason to fail a forward
  }
  return t;
}

void release_modules() {
  for (auto& item : trace.module_ids) Py_DECREF(item.first);
  trace.module_ids.clear();
}

void reset_columns() {
  std::lock_guard<std::mutex> guard(trace.op_lock);
  trace.ops = OpColumns();
  trace.calls = CallColumns();
  trace.module_calls = ModuleCallColumns();
  trace.contexts = ContextColumns();
  trace.nodes = NodeColumns();
  trace.backward = BackwardColumns();
  trace.scopes = ScopeColumns();
  trace.scopes_pushed = 0;
  trace.ops_pushed = 0;
  trace.thread_infos.clear();
  ++trace.generation;
  trace.threads = 0;
}

bool add_modules(PyObject* modules) {
  PyObject* fast = PySequence_Fast(modules, "modules must be a sequence of (module, module_id)");
  if (fast == nullptr) return false;
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(fast); ++i) {
    PyObject *module;
    long long module_id;
    ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "OL", &module, &module_id);
    if (ok && trace.module_ids.emplace(module, module_id).second) Py_INCREF(module);
  }
  Py_DECREF(fast);
  return ok;
}

bool set_running_before(PyObject* idents) {
  trace.running_before.clear();
  PyObject* fast = PySequence_Fast(idents, "running_before must be a sequence of thread idents");
  if (fast == nullptr) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); ++i) {
    unsigned long ident = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, i));
    if (ident == (unsigned long)-1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    trace.running_before.insert(ident);
  }
  Py_DECREF(fast);
  return true;
}

// The correlation kind start() was given: kind >= 0 pushes to CUPTI, kNoCorrelation nothing,
// kLogPushes into take()'s push_log.
bool correlation_kind_of(PyObject* kind, int log_pushes, int* out) {
  if (log_pushes) {
    if (kind != Py_None) {
      PyErr_SetString(PyExc_ValueError, "pass correlation_kind=None with log_pushes=True: logged ids go nowhere else");
      return false;
    }
    *out = kLogPushes;
    return true;
  }
  if (kind == Py_None) {
    *out = kNoCorrelation;
    return true;
  }
  long value = PyLong_AsLong(kind);
  if (value == -1 && PyErr_Occurred()) return false;
  if (value < 0 || value > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "correlation_kind must be a CUPTI external-correlation kind (>= 0) or None; got %ld",
                 value);
    return false;
  }
  *out = int(value);
  return true;
}

// A push or pop entry point start() was given: the address (an int) of a C function with the
// signature of cuptiActivityPush/PopExternalCorrelationId, required where kind >= 0, else None.
bool entry_point_of(PyObject* address, const char* keyword, int kind, void** out) {
  *out = nullptr;
  if (address == Py_None) {
    if (kind < 0) return true;
    PyErr_Format(PyExc_ValueError,
                 "correlation_kind=%d pushes ids, so %s must be the address of the activity source's C function "
                 "(CorrelationTarget.correlation_functions), not None",
                 kind, keyword);
    return false;
  }
  if (kind < 0) {
    PyErr_Format(PyExc_ValueError, "%s is for a pass that pushes (correlation_kind >= 0): pass None", keyword);
    return false;
  }
  if (!PyLong_Check(address) || PyBool_Check(address)) {
    PyErr_Format(PyExc_TypeError, "%s must be a C function's address (int) or None", keyword);
    return false;
  }
  *out = PyLong_AsVoidPtr(address);
  if (*out == nullptr) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s is a null address", keyword);
    return false;
  }
  return true;
}

// Keyword arguments of start(), all required (checked by name once parsed).
struct StartArguments {
  PyObject* correlation_kind = nullptr;
  PyObject* correlation_push = nullptr;
  PyObject* correlation_pop = nullptr;
  int log_pushes = 0;
  PyObject* modules = nullptr;
  PyObject* sample_key = nullptr;
  PyObject* singletons = nullptr;
  PyObject* running_before = nullptr;
  int record_ops = 1;
  FunctionModeSettings mode;
};

const char* const kStartKeywords[] = {"correlation_kind", "correlation_push", "correlation_pop", "log_pushes",
                                      "modules", "functions", "sample_names", "all_functions", "rearmed_copy",
                                      "api_name", "push_mode", "pop_mode", "routing_mode_below", "sample_key",
                                      "singletons", "running_before", "hook_objects", "record_ops", "outermost_only",
                                      nullptr};

bool parse_start(PyObject* args, PyObject* kwargs, StartArguments* a) {
  if (PyTuple_GET_SIZE(args) != 0) {
    PyErr_SetString(PyExc_TypeError, "start() takes keyword arguments only (tracing/native.py NativePass names them)");
    return false;
  }
  int all_functions = 0;
  int hook_objects = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOpOO!OpOOOOOOO!OppO!", const_cast<char**>(kStartKeywords),
                                   &a->correlation_kind, &a->correlation_push, &a->correlation_pop, &a->log_pushes,
                                   &a->modules, &PyDict_Type, &a->mode.functions,
                                   &a->mode.sample_names, &all_functions, &a->mode.rearmed_copy, &a->mode.api_name,
                                   &a->mode.push_mode, &a->mode.pop_mode, &a->mode.routing_mode_below, &a->sample_key,
                                   &PyTuple_Type, &a->singletons, &a->running_before, &hook_objects,
                                   &a->record_ops, &PyFrozenSet_Type, &a->mode.outermost_only))
    return false;
  a->mode.all_functions = all_functions != 0;
  a->mode.hook_objects = hook_objects != 0;
  PyObject* given[] = {a->correlation_kind, a->correlation_push, a->correlation_pop, Py_None, a->modules,
                       a->mode.functions, a->mode.sample_names, Py_None,
                       a->mode.rearmed_copy, a->mode.api_name, a->mode.push_mode, a->mode.pop_mode,
                       a->mode.routing_mode_below, a->sample_key, a->singletons, a->running_before, Py_None,
                       Py_None, a->mode.outermost_only};
  for (size_t i = 0; i < sizeof(given) / sizeof(given[0]); ++i) {
    if (given[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "start() is missing the keyword argument %s", kStartKeywords[i]);
      return false;
    }
  }
  return true;
}

// start(*, correlation_kind, correlation_push, correlation_pop, log_pushes, modules [(module, id)], functions,
//       sample_names, all_functions, rearmed_copy, api_name, push_mode, pop_mode, routing_mode_below,
//       sample_key, singletons, running_before [ident], hook_objects, record_ops, outermost_only):
//       tracing/native.py NativePass documents each
PyObject* py_start(PyObject*, PyObject* args, PyObject* kwargs) {
  StartArguments a;
  int kind;
  void* push;
  void* pop;
  if (!parse_start(args, kwargs, &a) || !correlation_kind_of(a.correlation_kind, a.log_pushes, &kind) ||
      !entry_point_of(a.correlation_push, "correlation_push", kind, &push) ||
      !entry_point_of(a.correlation_pop, "correlation_pop", kind, &pop))
    return nullptr;
  if (trace.running) {
    PyErr_SetString(PyExc_RuntimeError, "the native tracer is already recording a pass; stop() it first");
    return nullptr;
  }
  trace.kind = kind;
  trace.push = reinterpret_cast<PushFn>(push);
  trace.pop = reinterpret_cast<PopFn>(pop);
  push_log.clear();
  if (kind == kLogPushes) {
    trace.push = log_push;
    trace.pop = log_pop;
  }
  reset_columns();
  release_modules();
  if (a.mode.hook_objects && a.mode.all_functions) {
    PyErr_SetString(PyExc_ValueError, "hook_objects=True records torch.nn.functional calls only: pass all_functions=False");
    return nullptr;
  }
  if (!set_running_before(a.running_before) || !add_modules(a.modules) || !function_mode_configure(a.mode) ||
      !samples_configure(a.sample_key, a.singletons) || (a.mode.hook_objects && !function_mode_install_hooks(a.mode.outermost_only))) {
    release_modules();
    function_mode_clear();
    samples_clear();
    return nullptr;
  }
  named_thread_state();  // the starting thread is thread 0, as in the Python recorder
  PyObject* error = nullptr;
  if (a.record_ops && !start_op_tracer(&error)) {
    release_modules();
    function_mode_clear();
    samples_clear();
    PyErr_SetObject(PyExc_RuntimeError, error);
    Py_XDECREF(error);
    return nullptr;
  }
  trace.running = true;
  Py_RETURN_NONE;
}

// stop(): removes the op callback and the function-mode configuration (idempotent); the rows and
// samples stay until take()
PyObject* py_stop(PyObject*, PyObject*) {
  stop_op_tracer();
  function_mode_clear();
  release_modules();
  trace.running = false;
  Py_RETURN_NONE;
}

PyObject* py_running(PyObject*, PyObject*) { return PyBool_FromLong(trace.running); }

PyObject* py_hooks_unsupported(PyObject*, PyObject*) {
  const char* reason = function_hooks_unsupported();
  if (reason == nullptr) Py_RETURN_NONE;
  return PyUnicode_FromString(reason);
}

PyObject* py_hooked(PyObject*, PyObject* func) { return PyBool_FromLong(function_hooked(func)); }

PyObject* py_hooks_installed(PyObject*, PyObject*) { return PyLong_FromSsize_t(function_hooks_installed()); }

PyObject* py_enter_module(PyObject*, PyObject* module) {
  if (trace.running) {
    auto found = trace.module_ids.find(module);
    if (found != trace.module_ids.end()) enter_module(named_thread_state(), found->second);
  }
  Py_RETURN_NONE;
}

PyObject* py_exit_module(PyObject*, PyObject* module) {
  if (trace.running) {
    auto found = trace.module_ids.find(module);
    if (found != trace.module_ids.end()) exit_module(named_thread_state(), found->second);
  }
  Py_RETURN_NONE;
}

// add_modules([(module, module_id)]): modules discovered during the pass (a recording() without a
// module finds its roots as they are called) join the hierarchy; the caller holds the GIL, as
// enter_module / exit_module do, the only readers of module_ids
PyObject* py_add_modules(PyObject*, PyObject* modules) {
  if (!trace.running) {
    PyErr_SetString(PyExc_RuntimeError, "add_modules() adds to a running pass: call start() first");
    return nullptr;
  }
  if (!add_modules(modules)) return nullptr;
  Py_RETURN_NONE;
}

template <typename T>
PyObject* as_bytes(const std::vector<T>& column) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(column.data()), Py_ssize_t(column.size() * sizeof(T)));
}

// the column as bytes, its memory released at once (at 10^6 kernels a pass holds millions of rows:
// never both copies of every column at the same time)
template <typename T>
PyObject* moved_bytes(std::vector<T>& column) {
  PyObject* bytes = as_bytes(column);
  std::vector<T>().swap(column);
  return bytes;
}

PyObject* thread_list() {
  PyObject* list = PyList_New(Py_ssize_t(trace.thread_infos.size()));
  for (size_t i = 0; list != nullptr && i < trace.thread_infos.size(); ++i) {
    const ThreadInfo& info = trace.thread_infos[i];
    PyObject* row = Py_BuildValue("(ns#OLk)", Py_ssize_t(i), info.name.data(), Py_ssize_t(info.name.size()),
                                  info.traced ? Py_True : Py_False, (long long)info.skipped_forwards, info.native_id);
    if (row == nullptr) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, Py_ssize_t(i), row);
  }
  return list;
}

PyObject* string_list(const std::vector<std::string>& names);

// the backward ops' forward threads as trace thread indexes (-1: a thread that reported nothing traced)
std::vector<int64_t> forward_threads(const BackwardColumns& b) {
  std::unordered_map<uint64_t, int64_t> index;
  for (size_t i = 0; i < trace.thread_infos.size(); ++i) index.emplace(trace.thread_infos[i].record_function_id, int64_t(i));
  std::vector<int64_t> threads;
  threads.reserve(b.forward_thread.size());
  for (uint64_t id : b.forward_thread) {
    auto found = index.find(id);
    threads.push_back(found == index.end() ? -1 : found->second);
  }
  return threads;
}

// the linking columns of tracing/links.py, added to take()'s dict; false with an exception set on failure
bool add_link_columns(PyObject* result) {
  std::vector<int64_t> forward = forward_threads(trace.backward);
  std::pair<const char*, PyObject*> items[] = {
      {"node_op", moved_bytes(trace.nodes.op)},
      {"node_thread", moved_bytes(trace.nodes.thread)},
      {"node_first", moved_bytes(trace.nodes.first)},
      {"node_end", moved_bytes(trace.nodes.end)},
      {"backward_op", moved_bytes(trace.backward.op)},
      {"backward_seq", moved_bytes(trace.backward.seq)},
      {"backward_thread", moved_bytes(forward)},
      {"scope_names", string_list(trace.scopes.name)},
      {"scope_thread", moved_bytes(trace.scopes.thread)},
      {"scope_start", moved_bytes(trace.scopes.start)},
      {"scope_end", moved_bytes(trace.scopes.end)},
  };
  bool ok = true;
  for (auto& item : items) {
    ok = ok && item.second != nullptr && PyDict_SetItemString(result, item.first, item.second) == 0;
    Py_XDECREF(item.second);
  }
  trace.backward = BackwardColumns();
  trace.scopes = ScopeColumns();
  return ok;
}

PyObject* as_list(const Names& names) { return string_list(names.names); }

PyObject* string_list(const std::vector<std::string>& names) {
  PyObject* list = PyList_New(Py_ssize_t(names.size()));
  for (size_t i = 0; list != nullptr && i < names.size(); ++i) {
    const std::string& name = names[i];
    PyObject* text = PyUnicode_FromStringAndSize(name.data(), Py_ssize_t(name.size()));
    if (text == nullptr) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, Py_ssize_t(i), text);
  }
  return list;
}

// take() -> dict of columns (bytes), name lists and samples; clears the rows
PyObject* py_take(PyObject*, PyObject*) {
  if (trace.running) {
    PyErr_SetString(PyExc_RuntimeError, "take() needs a stopped tracer; call stop() first");
    return nullptr;
  }
  std::lock_guard<std::mutex> guard(trace.op_lock);
  OpColumns& o = trace.ops;
  CallColumns& c = trace.calls;
  ModuleCallColumns& m = trace.module_calls;
  ContextColumns& x = trace.contexts;
  PyObject* samples = samples_take();
  if (samples == nullptr) return nullptr;
  PyObject* result = Py_BuildValue(
      "{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N, s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N, s:N,s:N,s:N,s:N, s:N,s:N, s:N,s:K,s:K,s:N}",
      "op_names", as_list(trace.op_names), "op_name", moved_bytes(o.name), "op_module", moved_bytes(o.module), "op_call",
      moved_bytes(o.call), "op_thread", moved_bytes(o.thread), "op_start", moved_bytes(o.start), "op_end", moved_bytes(o.end),
      "function_names", as_list(trace.function_names), "call_name", moved_bytes(c.name), "call_parent",
      moved_bytes(c.parent), "call_module", moved_bytes(c.module), "call_start", moved_bytes(c.start), "call_end",
      moved_bytes(c.end), "call_thread", moved_bytes(c.thread), "call_sample", moved_bytes(c.sample), "samples", samples,
      "mcall_module", moved_bytes(m.module), "mcall_start", moved_bytes(m.start), "mcall_end", moved_bytes(m.end),
      "mcall_thread", moved_bytes(m.thread), "ctx_module", moved_bytes(x.module), "ctx_call", moved_bytes(x.call),
      "threads", thread_list(), "scopes_pushed",
      (unsigned long long)trace.scopes_pushed, "ops_pushed", (unsigned long long)trace.ops_pushed, "push_log",
      as_bytes(push_log));
  if (result != nullptr && !add_link_columns(result)) Py_CLEAR(result);
  push_log.clear();
  trace.ops = OpColumns();
  trace.calls = CallColumns();
  trace.module_calls = ModuleCallColumns();
  trace.contexts = ContextColumns();
  return result;
}

PyMethodDef methods[] = {
    {"start", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_start)), METH_VARARGS | METH_KEYWORDS,
     "start(*, correlation_kind, correlation_push, correlation_pop, log_pushes, modules, functions, sample_names, "
     "all_functions, rearmed_copy, api_name, push_mode, pop_mode, routing_mode_below, sample_key, singletons, "
     "running_before, hook_objects, record_ops, outermost_only): record a pass on this thread (record_ops=False: no aten op "
     "callback, benchmarks/recorded_pass.py's mechanism rows); correlation_kind (>= 0) pushes op and scope ids as external "
     "correlation ids of that kind through the C functions at correlation_push / correlation_pop (the activity "
     "source's), None pushes nothing, log_pushes=True logs them into take()'s push_log (tests)"},
    {"hooks_unsupported", py_hooks_unsupported, METH_NOARGS,
     "hooks_unsupported() -> None where function objects can be hooked (hook_objects=True), else the reason"},
    {"hooked", py_hooked, METH_O, "hooked(func) -> whether func's vectorcall slot holds the recording trampoline"},
    {"hooks_installed", py_hooks_installed, METH_NOARGS, "hooks_installed() -> how many slots hold the trampoline"},
    {"stop", py_stop, METH_NOARGS, "stop(): remove the op callback and the configuration (idempotent)"},
    {"running", py_running, METH_NOARGS, "running() -> bool"},
    {"enter_module", py_enter_module, METH_O, "enter_module(module): a forward of a profiled module begins"},
    {"exit_module", py_exit_module, METH_O, "exit_module(module): a forward of a profiled module ended"},
    {"add_modules", py_add_modules, METH_O,
     "add_modules([(module, module_id)]): modules discovered during the running pass join the hierarchy"},
    {"take", py_take, METH_NOARGS, "take() -> {column: bytes, ...}: the recorded pass; clears the rows"},
    {"sample_key_bytes", py_sample_key_bytes, METH_O,
     "sample_key_bytes(value) -> bytes, or None where the Python keyer decides"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tracer", "Native tracing backend of aitune_dispatch.", -1,
                          methods};

}  // namespace
}  // namespace aitune

#ifndef AITUNE_TORCH_VERSION
#define AITUNE_TORCH_VERSION "unknown"
#endif

PyMODINIT_FUNC PyInit__tracer(void) {
  PyObject* module = PyModule_Create(&aitune::module_def);
  if (module == nullptr) return nullptr;
  // the torch this was compiled against; Python refuses to use it under another torch
  if (PyModule_AddStringConstant(module, "torch_version", AITUNE_TORCH_VERSION) < 0 ||
      !aitune::function_mode_ready(module)) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
