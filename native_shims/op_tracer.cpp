// aitune_dispatch._op_tracer: the aten-op tracer as a thread-local at::RecordFunction callback.
//
// It records the ops a Python TorchDispatchMode would see (the outermost dispatched op that is
// not a CompositeImplicitAutograd decomposition; ops run inside it are not seen), gives each an
// op id, pushes that id as a CUPTI external correlation id around the op, and appends one row
// (name, module, functional call, thread, start, end) to column buffers. Python keeps the module
// and functional-call context current through set_context(); nothing here calls into Python.
//
// Built against the torch of the environment (setup.py, no build isolation); libcupti is never
// linked: push/pop are resolved from the copy already loaded in the process.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <time.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using PushFn = int (*)(int kind, uint64_t id);
using PopFn = int (*)(int kind, uint64_t* last_id);

constexpr int32_t kHidden = -1;  // a name the dispatch mode would not see (a decomposition)

struct Columns {
  std::vector<int32_t> name;
  std::vector<int64_t> module, call, thread, start, end;
  void clear() {
    name.clear(), module.clear(), call.clear(), thread.clear(), start.clear(), end.clear();
  }
};

struct Named {
  int32_t id;        // interned name id, or kHidden
  std::string name;  // checked on every cache hit
};

struct Tracer {
  std::mutex lock;
  Columns rows;
  std::unordered_map<const char*, Named> name_ids;  // RecordFunction name pointer -> what it names
  std::unordered_map<std::string, int32_t> interned;
  std::vector<std::string> names;
  at::CallbackHandle handle = 0;
  bool running = false;
  uint64_t generation = 0;  // thread states from an earlier session are reset on first use
  int kind = -1;            // CUPTI external-correlation kind, or -1: no push
  PushFn push = nullptr;
  PopFn pop = nullptr;
};

Tracer tracer;

struct ThreadState {
  uint64_t generation = 0;
  int64_t module = -1, call = -1, thread = -1;
  int depth = 0;              // recorded ops open on this thread
  std::vector<int64_t> open;  // one entry per started RecordFunction: op id or -1
};

thread_local ThreadState tls;

inline ThreadState& state() {
  ThreadState& t = tls;
  if (t.generation != tracer.generation) {
    t = ThreadState();
    t.generation = tracer.generation;
  }
  return t;
}

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // time.perf_counter_ns() on Linux
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Called with tracer.lock held. Cached by name pointer (a dispatcher op's name lives as long as
// its schema); the name is compared on every hit, as a freed name's address can be reused.
int32_t name_id(const at::RecordFunction& fn) {
  const char* key = fn.name();
  auto found = tracer.name_ids.find(key);
  if (found != tracer.name_ids.end()) {
    if (std::strcmp(found->second.name.c_str(), key) == 0) return found->second.id;
    tracer.name_ids.erase(found);
  }
  auto op_name = fn.operator_name();
  // a RecordFunction named by a string of its own is no dispatcher op: never seen, never cached
  if (!op_name) return kHidden;
  auto op = c10::Dispatcher::singleton().findOp(*op_name);
  if (op && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
    tracer.name_ids.emplace(key, Named{kHidden, key});
    return kHidden;
  }
  std::string name(key);
  auto known = tracer.interned.find(name);
  int32_t id = known != tracer.interned.end() ? known->second : int32_t(tracer.names.size());
  if (known == tracer.interned.end()) {
    tracer.names.push_back(name);
    tracer.interned.emplace(name, id);
  }
  tracer.name_ids.emplace(key, Named{id, name});
  return id;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  ThreadState& t = state();
  if (t.depth > 0) {
    t.open.push_back(-1);
    return nullptr;
  }
  int64_t op_id;
  {
    std::lock_guard<std::mutex> guard(tracer.lock);
    int32_t id = name_id(fn);
    if (id == kHidden) {
      t.open.push_back(-1);
      return nullptr;
    }
    Columns& c = tracer.rows;
    op_id = int64_t(c.name.size());
    c.name.push_back(id);
    c.module.push_back(t.module);
    c.call.push_back(t.call);
    c.thread.push_back(t.thread);
    c.end.push_back(0);
    c.start.push_back(now_ns());
  }
  t.open.push_back(op_id);
  ++t.depth;
  if (tracer.push) tracer.push(tracer.kind, uint64_t(op_id));
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  ThreadState& t = state();
  if (t.open.empty()) return;  // started before this session
  int64_t op_id = t.open.back();
  t.open.pop_back();
  if (op_id < 0) return;
  --t.depth;
  if (tracer.pop) {
    uint64_t last = 0;
    tracer.pop(tracer.kind, &last);
  }
  int64_t end = now_ns();
  std::lock_guard<std::mutex> guard(tracer.lock);
  if (size_t(op_id) < tracer.rows.end.size()) tracer.rows.end[op_id] = end;
}

bool resolve_cupti(PyObject** error) {
  void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcupti.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) {
    *error = PyUnicode_FromString(
        "libcupti.so.13 is not loaded in this process; start the CUPTI activity source first");
    return false;
  }
  tracer.push = reinterpret_cast<PushFn>(dlsym(lib, "cuptiActivityPushExternalCorrelationId"));
  tracer.pop = reinterpret_cast<PopFn>(dlsym(lib, "cuptiActivityPopExternalCorrelationId"));
  dlclose(lib);  // RTLD_NOLOAD took a reference; the library stays loaded by its owner
  if (tracer.push == nullptr || tracer.pop == nullptr) {
    *error = PyUnicode_FromString("libcupti lacks cuptiActivityPush/PopExternalCorrelationId");
    return false;
  }
  return true;
}

PyObject* py_start(PyObject*, PyObject* arg) {
  long kind = PyLong_AsLong(arg);
  if (kind == -1 && PyErr_Occurred()) return nullptr;
  if (tracer.running) {
    PyErr_SetString(PyExc_RuntimeError, "the native op tracer is already running; stop() it first");
    return nullptr;
  }
  tracer.push = nullptr;
  tracer.pop = nullptr;
  tracer.kind = int(kind);
  if (kind >= 0) {
    PyObject* message = nullptr;
    if (!resolve_cupti(&message)) {
      PyErr_SetObject(PyExc_RuntimeError, message);
      Py_XDECREF(message);
      return nullptr;
    }
  }
  {
    std::lock_guard<std::mutex> guard(tracer.lock);
    tracer.rows.clear();
    ++tracer.generation;
  }
  try {
    tracer.handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                                   .needsInputs(false)
                                                   .needsOutputs(false)
                                                   .needsIds(false)
                                                   .scopes({at::RecordScope::FUNCTION}));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  tracer.running = true;
  Py_RETURN_NONE;
}

PyObject* py_stop(PyObject*, PyObject*) {
  if (tracer.running) {
    at::removeCallback(tracer.handle);
    tracer.running = false;
    tracer.handle = 0;
  }
  Py_RETURN_NONE;
}

PyObject* py_running(PyObject*, PyObject*) { return PyBool_FromLong(tracer.running); }

PyObject* py_set_context(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "set_context(module_id, call_id, thread_index)");
    return nullptr;
  }
  ThreadState& t = state();
  t.module = PyLong_AsLongLong(args[0]);
  t.call = PyLong_AsLongLong(args[1]);
  t.thread = PyLong_AsLongLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NONE;
}

template <typename T>
PyObject* as_bytes(const std::vector<T>& column) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(column.data()),
                                   Py_ssize_t(column.size() * sizeof(T)));
}

PyObject* py_take(PyObject*, PyObject*) {
  Columns rows;
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> guard(tracer.lock);
    std::swap(rows, tracer.rows);
    names = tracer.names;
  }
  PyObject* name_list = PyList_New(Py_ssize_t(names.size()));
  if (name_list == nullptr) return nullptr;
  for (size_t i = 0; i < names.size(); ++i) {
    PyObject* text = PyUnicode_FromStringAndSize(names[i].data(), Py_ssize_t(names[i].size()));
    if (text == nullptr) {
      Py_DECREF(name_list);
      return nullptr;
    }
    PyList_SET_ITEM(name_list, Py_ssize_t(i), text);
  }
  return Py_BuildValue("(NNNNNNN)", name_list, as_bytes(rows.name), as_bytes(rows.module),
                       as_bytes(rows.call), as_bytes(rows.thread), as_bytes(rows.start),
                       as_bytes(rows.end));
}

PyMethodDef methods[] = {
    {"start", py_start, METH_O,
     "start(kind): trace this thread's ops; kind >= 0 pushes op ids as CUPTI external correlation ids"},
    {"stop", py_stop, METH_NOARGS, "stop(): remove the callback (idempotent)"},
    {"running", py_running, METH_NOARGS, "running() -> bool"},
    {"set_context", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_set_context)),
     METH_FASTCALL, "set_context(module_id, call_id, thread_index) for ops this thread runs next"},
    {"take", py_take, METH_NOARGS,
     "take() -> (names, name_id int32, module, call, thread, start, end int64 as bytes); clears rows"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_op_tracer",
                          "Native aten-op tracer (RecordFunction callback).", -1, methods};

}  // namespace

#ifndef AITUNE_TORCH_VERSION
#define AITUNE_TORCH_VERSION "unknown"
#endif

PyMODINIT_FUNC PyInit__op_tracer(void) {
  PyObject* module = PyModule_Create(&module_def);
  // the torch this was compiled against; Python refuses to use it under another torch
  if (module != nullptr && PyModule_AddStringConstant(module, "torch_version", AITUNE_TORCH_VERSION) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
