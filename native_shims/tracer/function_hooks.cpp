// Functional calls seen at the function objects themselves (docs/design.md, "Functional calls at the
// function object").
//
// CPython calls every function object through the vectorcall pointer stored in the object, unless a
// call site is specialized to bypass it. For the two kinds of torch.nn.functional function objects
// that pointer is ours to set during a pass:
//   - a torch builtin (PyCFunctionObject, METH_VARARGS | METH_KEYWORDS) has a NULL pointer and is
//     called through tp_call; CPython never specializes calls to such builtins, so with the pointer
//     set every call reaches it, from Python or C (functools.partial, map, a captured reference);
//   - a Python function (PyFunctionObject) is set with PyFunction_SetVectorcall, which also clears
//     the function's version, so no call site inlines its frame while it is hooked (its version is
//     assigned again once the original pointer is back).
// The trampoline opens the functional call (row, stacks, scope id), runs the original and closes it,
// errors included; the nested functional calls record themselves, except those hooked "outermost
// only": the in-place builtins (relu_) that torch's own functionals call (relu(x, inplace=True)) are
// part of that call, as the mode and the reference see it, and a call of their own only at the top. The object is not replaced and
// m_ml is not touched: its identity, hash and attributes are what Dynamo and the user see.
//
// A hook is installed for a pass and removed at stop(): a slot that another tool set on top of ours
// is left as it is (our trampoline, still in its chain, passes through). Hook records live for the
// process, so a thread still running inside a trampoline after stop() finds its original, and an
// address cannot be reused by another object. A forked child removes every hook at once.

#include "trace.h"

#include <pthread.h>

#include <cstddef>

namespace aitune {
namespace {

struct Hook {
  PyObject* func = nullptr;            // strong reference for the process
  vectorcallfunc original = nullptr;   // the slot before us; NULL: a METH_VARARGS builtin (tp_call)
  int32_t name_id = -1;
  bool sampled = false;
  bool active = false;                 // recording in the current pass
  bool builtin = false;
  bool outermost_only = false;         // not a call of its own inside another recorded call
  bool left_in_chain = false;          // restored while another tool's pointer sat on top of ours
};

std::unordered_map<PyObject*, Hook> hooks;  // every object ever hooked, by address
std::vector<PyObject*> installed;           // objects whose slot holds our trampoline now
bool at_fork_registered = false;

PyObject* trampoline(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames);

vectorcallfunc slot(PyObject* func, bool builtin) {
  return builtin ? reinterpret_cast<PyCFunctionObject*>(func)->vectorcall
                 : reinterpret_cast<PyFunctionObject*>(func)->vectorcall;
}

void set_slot(PyObject* func, bool builtin, vectorcallfunc value) {
  if (builtin) {
    reinterpret_cast<PyCFunctionObject*>(func)->vectorcall = value;
  } else {
#if PY_VERSION_HEX >= 0x030C0000
    PyFunction_SetVectorcall(reinterpret_cast<PyFunctionObject*>(func), value);
#else
    (void)value;  // never reached: function_hooks_unsupported() refuses CPython < 3.12
#endif
  }
}

// The call's positional arguments as a tuple and its keywords as a dict (nullptr: none), as CPython
// packs them for tp_call; false on error.
bool pack(PyObject* const* args, size_t nargsf, PyObject* kwnames, PyObject** tuple, PyObject** dict) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  *dict = nullptr;
  *tuple = PyTuple_New(nargs);
  if (*tuple == nullptr) return false;
  for (Py_ssize_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(*tuple, i, Py_NewRef(args[i]));
  Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nkw == 0) return true;
  *dict = PyDict_New();
  for (Py_ssize_t i = 0; *dict != nullptr && i < nkw; ++i) {
    if (PyDict_SetItem(*dict, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) Py_CLEAR(*dict);
  }
  if (*dict == nullptr) Py_CLEAR(*tuple);
  return *tuple != nullptr;
}

PyObject* call_packed(PyObject* callable, PyObject* tuple, PyObject* dict) {
  if (Py_EnterRecursiveCall(" while calling a Python object")) return nullptr;
  PyObject* result = Py_TYPE(callable)->tp_call(callable, tuple, dict);
  Py_LeaveRecursiveCall();
  return result;
}

// The original call; `tuple`/`dict` are the packed arguments where the caller already has them.
PyObject* run_original(const Hook& hook, PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames,
                       PyObject* tuple, PyObject* dict) {
  if (hook.original != nullptr) return hook.original(callable, args, nargsf, kwnames);
  if (tuple != nullptr) return call_packed(callable, tuple, dict);
  PyObject *packed_args, *packed_kwargs;
  if (!pack(args, nargsf, kwnames, &packed_args, &packed_kwargs)) return nullptr;
  PyObject* result = call_packed(callable, packed_args, packed_kwargs);
  Py_DECREF(packed_args);
  Py_XDECREF(packed_kwargs);
  return result;
}

PyObject* trampoline(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Hook& hook = hooks.find(callable)->second;  // only hooked objects carry this trampoline
  if (!hook.active || !trace.running) return run_original(hook, callable, args, nargsf, kwnames, nullptr, nullptr);
  ThreadState& t = thread_state();
  // a thread that was running before the pass is not the profiled function's; a functional handed to
  // a TorchFunctionMode (a user's, activate's) that calls it again, a wrapper of a functional
  // (functools.wraps, registered under the same name) calling what it wraps, and an outermost-only
  // builtin called inside any recorded call are the same call
  if (!t.traced || (!t.hooked.empty() && (hook.outermost_only || t.hooked.back() == hook.name_id)))
    return run_original(hook, callable, args, nargsf, kwnames, nullptr, nullptr);
  PyObject *tuple = nullptr, *dict = nullptr;
  int64_t sample = kNoSample;
  if (hook.sampled && t.modules.back() != kNoModule) {  // only calls inside the hierarchy are sampled
    if (!pack(args, nargsf, kwnames, &tuple, &dict)) return nullptr;
    sample = samples_observe(hook.name_id, tuple, dict);
    if (sample == -2) {
      Py_DECREF(tuple);
      Py_XDECREF(dict);
      return nullptr;
    }
  }
  uint64_t generation = trace.generation;
  int64_t call_id = begin_call(t, hook.name_id, sample, true);
  t.hooked.push_back(hook.name_id);
  PyObject* result = run_original(hook, callable, args, nargsf, kwnames, tuple, dict);
  // a pass stopped while this call ran (another thread's) has handed its rows over: nothing to close
  if (trace.running && trace.generation == generation) {
    t.hooked.pop_back();
    end_call(t, call_id);
  }
  Py_XDECREF(tuple);
  Py_XDECREF(dict);
  return result;
}

void restore_all() {
  for (PyObject* func : installed) {
    Hook& hook = hooks[func];
    hook.active = false;
    if (slot(func, hook.builtin) == trampoline) {
      set_slot(func, hook.builtin, hook.original);
    } else {
      hook.left_in_chain = true;  // theirs calls ours, which passes through: their pointer stays
    }
  }
  installed.clear();
  for (auto& item : hooks) item.second.active = false;
}

void restore_in_child() { restore_all(); }  // after fork: plain stores, no Python call

// 1: hookable; 0: not (reason set); the builtin flag set on success
int hookable(PyObject* func, bool* builtin, std::string* reason) {
  if (PyFunction_Check(func)) {
    *builtin = false;
    return 1;
  }
  if (PyCFunction_Check(func)) {
    *builtin = true;
    int flags = PyCFunction_GET_FLAGS(func);
    // builtins of other calling conventions may be called by specialized call sites that bypass the slot
    if ((flags & (METH_VARARGS | METH_KEYWORDS)) == (METH_VARARGS | METH_KEYWORDS) && !(flags & METH_METHOD)) return 1;
    *reason = "a builtin with another calling convention than METH_VARARGS | METH_KEYWORDS";
    return 0;
  }
  *reason = std::string("a ") + Py_TYPE(func)->tp_name + ", neither a Python function nor a builtin";
  return 0;
}

}  // namespace

const char* function_hooks_unsupported() {
#if PY_VERSION_HEX < 0x030C0000
  return "function-object hooks need CPython 3.12 or newer";
#else
#ifdef Py_GIL_DISABLED
  return "function-object hooks are not built for the free-threaded CPython";
#else
  // the slots are struct fields, not API: the running interpreter must lay them out as compiled
  if (Py_Version >> 16 != PY_VERSION_HEX >> 16) return "the native tracer was compiled for another CPython";
  if (PyCFunction_Type.tp_vectorcall_offset != Py_ssize_t(offsetof(PyCFunctionObject, vectorcall)) ||
      PyFunction_Type.tp_vectorcall_offset != Py_ssize_t(offsetof(PyFunctionObject, vectorcall)))
    return "this CPython lays out the vectorcall slot of function objects differently than compiled";
  return nullptr;
#endif
#endif
}

bool function_hooks_install(PyObject* ids, const std::vector<uint8_t>& sampled, PyObject* outermost_only) {
  if (const char* reason = function_hooks_unsupported()) {
    PyErr_SetString(PyExc_RuntimeError, reason);
    return false;
  }
  if (!installed.empty()) {
    PyErr_SetString(PyExc_RuntimeError, "function-object hooks are installed already; stop() the pass first");
    return false;
  }
  if (!at_fork_registered) {
    pthread_atfork(nullptr, nullptr, restore_in_child);
    at_fork_registered = true;
  }
  Py_ssize_t pos = 0;
  PyObject *func, *value;
  while (PyDict_Next(ids, &pos, &func, &value)) {
    bool builtin = false;
    std::string reason;
    if (!hookable(func, &builtin, &reason)) {
      restore_all();
      PyObject* text = PyObject_Repr(func);
      PyErr_Format(PyExc_TypeError, "cannot hook %U: %s", text != nullptr ? text : Py_None, reason.c_str());
      Py_XDECREF(text);
      return false;
    }
    long id = PyLong_AsLong(value);
    if (id == -1 && PyErr_Occurred()) {
      restore_all();
      return false;
    }
    auto found = hooks.find(func);
    if (found == hooks.end()) {
      found = hooks.emplace(func, Hook{}).first;
      found->second.func = Py_NewRef(func);
      found->second.builtin = builtin;
    }
    Hook& hook = found->second;
    hook.name_id = int32_t(id);
    hook.sampled = size_t(id) < sampled.size() && sampled[size_t(id)];
    int outermost = PySet_Contains(outermost_only, func);
    if (outermost < 0) {
      restore_all();
      return false;
    }
    hook.outermost_only = outermost == 1;
    hook.active = true;
    vectorcallfunc current = slot(func, builtin);
    // never twice: a trampoline still in another tool's chain records again from inside it
    if (current == trampoline || hook.left_in_chain) continue;
    hook.original = current;  // NULL for a torch builtin; anything else is chained to
    set_slot(func, builtin, trampoline);
    installed.push_back(func);
  }
  return true;
}

void function_hooks_remove() { restore_all(); }

Py_ssize_t function_hooks_installed() { return Py_ssize_t(installed.size()); }

bool function_hooked(PyObject* func) {
  auto found = hooks.find(func);
  if (found == hooks.end()) return false;
  return slot(func, found->second.builtin) == trampoline;
}

}  // namespace aitune
