// The function mode's handler in C++: FunctionModeBase, the base of tracing/native.py's
// NativeFunctionMode (a TorchFunctionMode).
//
// torch dispatches a torch-function mode by looking up `__torch_function__` on the mode object
// and calling it with (func, types, args, kwargs). This type answers that attribute lookup with a
// C function, so a torch call that is not an intercepted functional runs one dictionary lookup
// and is forwarded, with no Python frame of ours. torch.compile's tracer reads attributes
// statically from the class, where the Python subclass keeps a traceable `__torch_function__`
// that lets compiled regions run as compiled.
//
// For an intercepted functional the handler keys its sample, opens a functional call (row, stacks,
// scope id) and runs it; a Python-level functional that can reach another functional runs as a
// gate-free copy with the mode pushed again, so the nested functional calls are seen, and a
// functional calling back through its own public name runs the original (tracing/functional.py
// has the same logic in Python).

#include "trace.h"

#include <ATen/PythonTorchFunctionTLS.h>

namespace aitune {
namespace {

struct ModeObject {
  PyObject_HEAD
  PyObject* handler;  // the C handler bound to the mode (a method object), created on first lookup
};

struct Config {
  PyObject* registry = nullptr;    // {functional: name id}
  PyObject* rearm_cache = nullptr;  // {functional: gate-free copy or None}
  PyObject* api_cache = nullptr;    // {torch-level API: name id, or -1 for metadata reads}
  PyObject* rearm = nullptr;       // rearm(func) -> copy or None
  PyObject* api_name = nullptr;    // api_name(func) -> "torch.addmm" or None
  PyObject* wanted = nullptr;      // frozenset of function_names, or None: every functional
  PyObject* push_mode = nullptr;   // torch._C._push_on_torch_function_stack
  PyObject* pop_mode = nullptr;    // torch._C._pop_torch_function_stack
  PyObject* routing_below = nullptr;  // routing_below() -> whether a mode below ours wants the call itself
  bool all_functions = false;
  std::vector<uint8_t> sampled;    // by function name id
};

Config config;
PyObject* empty_tuple = nullptr;
PyObject* torch_function_name = nullptr;

void clear_config() {
  Py_CLEAR(config.registry);
  Py_CLEAR(config.rearm_cache);
  Py_CLEAR(config.api_cache);
  Py_CLEAR(config.rearm);
  Py_CLEAR(config.api_name);
  Py_CLEAR(config.wanted);
  Py_CLEAR(config.push_mode);
  Py_CLEAR(config.pop_mode);
  Py_CLEAR(config.routing_below);
  config.all_functions = false;
  config.sampled.clear();
}

// 1: name is in function_names; 0: not; -1: error
int named(const std::string& name) {
  PyObject* text = PyUnicode_FromStringAndSize(name.data(), Py_ssize_t(name.size()));
  if (text == nullptr) return -1;
  int found = PySet_Contains(config.wanted, text);
  Py_DECREF(text);
  return found;
}

// interns a function name and decides once whether its calls are sampled
int32_t intern(const std::string& name, bool functional) {
  int32_t id = trace.function_names.id(name);
  if (size_t(id) < config.sampled.size()) return id;
  int wanted = 1;
  if (config.wanted != Py_None) {
    wanted = named(name);
    if (wanted < 0) return -1;
  } else if (!functional) {
    wanted = 0;  // torch-level calls are sampled only when named in function_names
  }
  config.sampled.resize(size_t(id) + 1, 0);
  config.sampled[size_t(id)] = uint8_t(wanted);
  return id;
}

// The gate-free copy of func to run with the mode re-armed, Py_None to run func as it is, or
// nullptr on error; borrowed.
PyObject* rearm_copy(PyObject* func) {
  PyObject* found = PyDict_GetItemWithError(config.rearm_cache, func);
  if (found != nullptr || PyErr_Occurred()) return found;
  PyObject* copy = PyObject_CallOneArg(config.rearm, func);
  if (copy == nullptr) return nullptr;
  int failed = PyDict_SetItem(config.rearm_cache, func, copy);
  Py_DECREF(copy);  // the cache holds it
  return failed ? nullptr : copy;
}

// modes on this thread's torch-function stack (ours is popped while its handler runs)
Py_ssize_t torch_function_modes() { return Py_ssize_t(at::impl::PythonTorchFunctionTLS::stack_len()); }

PyObject* pop_mode_keeping_error() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* popped = PyObject_CallNoArgs(config.pop_mode);
  if (type != nullptr) {
    Py_XDECREF(popped);
    PyErr_Restore(type, value, traceback);  // the functional's own error wins
    return nullptr;
  }
  return popped;
}

PyObject* run_call(PyObject* self, ThreadState& t, PyObject* func, PyObject* args, PyObject* kwargs,
                   int32_t name_id, int64_t sample, bool functional) {
  PyObject* copy = Py_None;
  if (functional) {
    copy = rearm_copy(func);
    if (copy == nullptr) return nullptr;
  }
  if (copy != Py_None && torch_function_modes() > 0) {
    // another TorchFunctionMode below ours (aitune_dispatch.activate, a user's mode) must see the
    // call itself: the gate-free copy would skip it, so the original runs instead
    PyObject* below = PyObject_CallNoArgs(config.routing_below);
    if (below == nullptr) return nullptr;
    int routed = PyObject_IsTrue(below);
    Py_DECREF(below);
    if (routed < 0) return nullptr;
    if (routed) copy = Py_None;
  }
  int64_t call_id = begin_call(t, name_id, sample, functional);
  PyObject* result;
  if (copy != Py_None) {
    PyObject* pushed = PyObject_CallOneArg(config.push_mode, self);
    if (pushed == nullptr) {
      end_call(t, call_id);
      return nullptr;
    }
    Py_DECREF(pushed);
    t.reentered.push_back(func);
    result = PyObject_Call(copy, args, kwargs);
    t.reentered.pop_back();
    PyObject* popped = pop_mode_keeping_error();
    if (popped == nullptr) Py_CLEAR(result);
    Py_XDECREF(popped);
  } else {
    result = PyObject_Call(func, args, kwargs);
  }
  end_call(t, call_id);
  return result;
}

int64_t sample_of(ThreadState& t, int32_t name_id, PyObject* args, PyObject* kwargs) {
  // only calls inside the profiled hierarchy are sampled; the others stay in the calls table
  if (!config.sampled[size_t(name_id)] || t.modules.back() == kNoModule) return kNoSample;
  return samples_observe(name_id, args, kwargs);
}

// functions="all": a torch-level API call counts where no functional call encloses it
PyObject* torch_level_call(PyObject* self, PyObject* func, PyObject* args, PyObject* kwargs) {
  PyObject* found = PyDict_GetItemWithError(config.api_cache, func);
  long name_id;
  if (found != nullptr) {
    name_id = PyLong_AsLong(found);
  } else {
    if (PyErr_Occurred()) return nullptr;
    PyObject* name = PyObject_CallOneArg(config.api_name, func);
    if (name == nullptr) return nullptr;
    name_id = -1;
    if (name != Py_None) {
      const char* text = PyUnicode_AsUTF8(name);
      name_id = text != nullptr ? intern(text, false) : -2;
    }
    Py_DECREF(name);
    if (name_id == -2 || (name_id == -1 && PyErr_Occurred())) return nullptr;
    PyObject* value = PyLong_FromLong(name_id);
    if (value == nullptr || PyDict_SetItem(config.api_cache, func, value) < 0) {
      Py_XDECREF(value);
      return nullptr;
    }
    Py_DECREF(value);
  }
  ThreadState& t = thread_state();
  if (name_id < 0 || t.functional_depth > 0) return PyObject_Call(func, args, kwargs);
  int64_t sample = sample_of(t, int32_t(name_id), args, kwargs);
  if (sample == -2) return nullptr;
  // run as it is: what a torch-level API does inside is its own (no re-armed nested calls)
  return run_call(self, t, func, args, kwargs, int32_t(name_id), sample, false);
}

// __torch_function__(func, types, args=(), kwargs=None)
PyObject* handle(PyObject* self, PyObject* const* argv, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs < 2 || nargs > 4 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) > 0)) {
    PyErr_SetString(PyExc_TypeError, "__torch_function__(func, types, args=(), kwargs=None)");
    return nullptr;
  }
  PyObject* func = argv[0];
  PyObject* args = nargs > 2 ? argv[2] : empty_tuple;
  PyObject* kwargs = nargs > 3 && argv[3] != Py_None ? argv[3] : nullptr;
  if (config.registry == nullptr) return PyObject_Call(func, args, kwargs);  // not configured: transparent
  PyObject* found = PyDict_GetItemWithError(config.registry, func);
  if (found == nullptr) {
    if (PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
      PyErr_Clear();  // unhashable callables are no torch functions
    } else if (config.all_functions) {
      return torch_level_call(self, func, args, kwargs);
    }
    return PyObject_Call(func, args, kwargs);  // the hot path: every other torch call
  }
  ThreadState& t = thread_state();
  // the gate-free copy of func called back through its public name: the same call
  if (!t.reentered.empty() && t.reentered.back() == func) return PyObject_Call(func, args, kwargs);
  int32_t name_id = int32_t(PyLong_AsLong(found));
  int64_t sample = sample_of(t, name_id, args, kwargs);
  if (sample == -2) return nullptr;
  return run_call(self, t, func, args, kwargs, name_id, sample, true);
}

PyTypeObject mode_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

// The handler unbound, (mode, func, types, args=(), kwargs=None): the lookup binds it to the mode as
// a real method object (types.MethodType), because torch.compile's tracer takes what the lookup
// returns for a plain function unless it is one. With a builtin bound to the mode instead, torch
// 2.11's Dynamo inlined the class's Python __torch_function__ without `self`, failed, and ran the
// compiled frame eagerly.
PyObject* handle_unbound(PyObject*, PyObject* const* argv, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs < 1 || !PyObject_TypeCheck(argv[0], &mode_type)) {
    PyErr_SetString(PyExc_TypeError, "__torch_function__ needs a FunctionModeBase as its first argument");
    return nullptr;
  }
  return handle(argv[0], argv + 1, nargs - 1, kwnames);
}

PyMethodDef handler_def = {"__torch_function__",
                           reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(handle_unbound)),
                           METH_FASTCALL | METH_KEYWORDS, "the native torch-function handler"};
PyObject* unbound_handler = nullptr;

PyObject* mode_getattro(PyObject* self, PyObject* name) {
  if (PyUnicode_Check(name) && PyUnicode_GET_LENGTH(name) == 18 && PyUnicode_Compare(name, torch_function_name) == 0) {
    ModeObject* mode = reinterpret_cast<ModeObject*>(self);
    if (mode->handler == nullptr) {
      mode->handler = PyMethod_New(unbound_handler, self);
      if (mode->handler == nullptr) return nullptr;
    }
    Py_INCREF(mode->handler);
    return mode->handler;
  }
  return PyObject_GenericGetAttr(self, name);
}

int mode_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<ModeObject*>(self)->handler);
  return 0;
}

int mode_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<ModeObject*>(self)->handler);
  return 0;
}

void mode_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  mode_clear(self);
  Py_TYPE(self)->tp_free(self);
}

}  // namespace

bool function_mode_ready(PyObject* module) {
  empty_tuple = PyTuple_New(0);
  torch_function_name = PyUnicode_InternFromString("__torch_function__");
  unbound_handler = PyCFunction_NewEx(&handler_def, nullptr, nullptr);
  if (empty_tuple == nullptr || torch_function_name == nullptr || unbound_handler == nullptr) return false;
  mode_type.tp_name = "aitune_dispatch.tracing._tracer.FunctionModeBase";
  mode_type.tp_basicsize = sizeof(ModeObject);
  mode_type.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC;
  mode_type.tp_doc = "Base of a TorchFunctionMode whose __torch_function__, as torch looks it up, is native.";
  mode_type.tp_getattro = mode_getattro;
  mode_type.tp_traverse = mode_traverse;
  mode_type.tp_clear = mode_clear;
  mode_type.tp_dealloc = mode_dealloc;
  mode_type.tp_new = PyType_GenericNew;
  if (PyType_Ready(&mode_type) < 0) return false;
  Py_INCREF(&mode_type);
  return PyModule_AddObject(module, "FunctionModeBase", reinterpret_cast<PyObject*>(&mode_type)) == 0;
}

// The registry as the last configure() interned it, kept across passes: a pass handed the same registry
// object with the same sampling settings starts from it instead of interning every functional again
// (a graph capture under the observer, and every pass, pays start() once; docs/design.md, "What a pass
// pays once"). Strong references: the registry and name set cannot be freed and their address reused.
struct ConfiguredRegistry {
  PyObject* registry = nullptr;  // the {functional: name} handed over
  PyObject* wanted = nullptr;    // its sample_names
  bool all_functions = false;
  PyObject* ids = nullptr;       // {functional: name id}
  size_t names = 0;              // trace.function_names' first `names` entries are the registry's
  std::vector<uint8_t> sampled;  // config.sampled for those names
};
ConfiguredRegistry configured;

void forget_configured() {
  Py_CLEAR(configured.registry);
  Py_CLEAR(configured.wanted);
  Py_CLEAR(configured.ids);
  configured.names = 0;
  configured.sampled.clear();
}

// 1: the last configuration serves these settings; 0: it does not; -1: error
int configured_for(const FunctionModeSettings& settings) {
  if (configured.ids == nullptr || configured.registry != settings.functions ||
      configured.all_functions != settings.all_functions)
    return 0;
  if (configured.wanted == settings.sample_names) return 1;
  if (configured.wanted == Py_None || settings.sample_names == Py_None) return 0;
  return PyObject_RichCompareBool(configured.wanted, settings.sample_names, Py_EQ);
}

// Names interned after the registry's (the torch-level calls of the last pass) are dropped, so each
// pass names exactly what a fresh configuration would: the registry's names, then its own.
void truncate_names(Names& names, size_t keep) {
  for (size_t i = keep; i < names.names.size(); ++i) names.ids.erase(names.names[i]);
  names.names.resize(keep);
}

bool function_mode_configure(const FunctionModeSettings& settings) {
  PyObject* registry = settings.functions;
  clear_config();
  config.wanted = Py_NewRef(settings.sample_names);
  config.all_functions = settings.all_functions;
  config.rearm = Py_NewRef(settings.rearmed_copy);
  config.api_name = Py_NewRef(settings.api_name);
  config.push_mode = Py_NewRef(settings.push_mode);
  config.pop_mode = Py_NewRef(settings.pop_mode);
  config.routing_below = Py_NewRef(settings.routing_mode_below);
  config.rearm_cache = PyDict_New();
  config.api_cache = PyDict_New();
  if (config.rearm_cache == nullptr || config.api_cache == nullptr) {
    clear_config();
    return false;
  }
  int reuse = configured_for(settings);
  if (reuse < 0) {
    clear_config();
    return false;
  }
  if (reuse && trace.function_names.names.size() >= configured.names) {
    truncate_names(trace.function_names, configured.names);
    config.sampled = configured.sampled;
    config.registry = Py_NewRef(configured.ids);
    return true;
  }
  forget_configured();
  trace.function_names = Names();
  PyObject* ids = PyDict_New();
  if (ids == nullptr) {
    clear_config();
    return false;
  }
  Py_ssize_t pos = 0;
  PyObject *func, *name;
  while (PyDict_Next(registry, &pos, &func, &name)) {
    const char* text = PyUnicode_AsUTF8(name);
    int32_t id = text != nullptr ? intern(text, true) : -1;
    PyObject* value = id >= 0 ? PyLong_FromLong(id) : nullptr;
    if (value == nullptr || PyDict_SetItem(ids, func, value) < 0) {
      Py_XDECREF(value);
      Py_DECREF(ids);
      clear_config();
      return false;
    }
    Py_DECREF(value);
  }
  config.registry = ids;
  configured.registry = Py_NewRef(registry);
  configured.wanted = Py_NewRef(settings.sample_names);
  configured.all_functions = settings.all_functions;
  configured.ids = Py_NewRef(ids);
  configured.names = trace.function_names.names.size();
  configured.sampled = config.sampled;
  return true;
}

void function_mode_clear() {
  function_hooks_remove();
  clear_config();
}

bool function_mode_install_hooks(PyObject* outermost_only) {
  return function_hooks_install(config.registry, config.sampled, outermost_only);
}

}  // namespace aitune
