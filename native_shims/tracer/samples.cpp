// Distinct input samples of functional calls, keyed in C++.
//
// Two calls are the same sample when their argument structure, every tensor's shape, dtype,
// layout, device and strides, and every non-tensor value agree: the rules of tracing/samples.py
// (sample_key). The key is an injective byte encoding of exactly those things. A value of a type
// this encoder does not know (a user object, a tensor subclass, an int beyond 64 bits) sends the
// whole sample through the Python keyer instead, so the rules are the Python ones everywhere.
// Only the first call of each distinct sample keeps its (args, kwargs); later calls are counted.

#include "trace.h"

#include <torch/csrc/Device.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <cstring>

namespace aitune {
namespace {

struct Entry {
  int64_t count;
  PyObject* sample;  // (args tuple, kwargs dict), owned
};

struct FunctionSamples {
  std::unordered_map<std::string, int64_t> by_key;
  PyObject* by_python_key = nullptr;  // dict: Python key -> index, owned
  std::vector<Entry> entries;
};

std::unordered_map<int32_t, FunctionSamples> store;
std::vector<int32_t> order;  // function name ids, in order of their first sampled call
PyObject* python_key = nullptr;  // samples.sample_pair_key(args, kwargs), owned
PyTypeObject* singleton_types[3] = {nullptr, nullptr, nullptr};  // torch.dtype, torch.layout, torch.memory_format

struct Writer {
  std::string out;
  void tag(char c) { out.push_back(c); }
  void i64(int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void ptr(const void* p) { out.append(reinterpret_cast<const char*>(&p), sizeof p); }
};

bool encode(PyObject* v, Writer& w, int depth);

bool encode_tensor(PyObject* v, Writer& w) {
  const at::Tensor& t = THPVariable_Unpack(v);
  if (!t.defined()) return false;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->has_symbolic_sizes_strides()) return false;
  try {
    at::IntArrayRef sizes = t.sizes();
    w.tag('T');
    w.i64(int64_t(t.scalar_type()));
    w.i64(int64_t(t.layout()));
    w.i64(int64_t(t.device().type()));
    w.i64(int64_t(t.device().index()));
    w.i64(int64_t(sizes.size()));
    for (int64_t s : sizes) w.i64(s);
  } catch (const std::exception&) {
    return false;  // nested tensors: the Python keyer decides
  }
  try {
    at::IntArrayRef strides = t.strides();
    w.tag('s');
    w.i64(int64_t(strides.size()));
    for (int64_t s : strides) w.i64(s);
  } catch (const std::exception&) {
    w.tag('-');  // sparse tensors have no strides (None in the Python key)
  }
  return true;
}

bool encode_items(PyObject* const* items, Py_ssize_t n, Writer& w, int depth) {
  w.i64(int64_t(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!encode(items[i], w, depth + 1)) return false;
  return true;
}

bool encode_str(PyObject* v, Writer& w) {
  Py_ssize_t n = 0;
  const char* text = PyUnicode_AsUTF8AndSize(v, &n);
  if (text == nullptr) {
    PyErr_Clear();
    return false;
  }
  w.tag('u');
  w.i64(int64_t(n));
  w.out.append(text, size_t(n));
  return true;
}

bool encode(PyObject* v, Writer& w, int depth) {
  if (depth > 64) return false;
  PyTypeObject* tp = Py_TYPE(v);
  if (THPVariable_CheckExact(v)) return encode_tensor(v, w);  // Tensor and Parameter
  if (tp == &PyBool_Type) {
    w.tag(v == Py_True ? 'B' : 'b');
    return true;
  }
  if (tp == &PyLong_Type) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    w.tag('i');
    w.i64(int64_t(value));
    return true;
  }
  if (tp == &PyFloat_Type) {
    double value = PyFloat_AS_DOUBLE(v);
    if (std::isnan(value)) value = std::nan("");  // every NaN is one sample, as float.hex() says
    int64_t bits;
    std::memcpy(&bits, &value, sizeof bits);  // -0.0 and 0.0 differ, as float.hex() says
    w.tag('f');
    w.i64(bits);
    return true;
  }
  if (tp == &PyUnicode_Type) return encode_str(v, w);
  if (v == Py_None) {
    w.tag('n');
    return true;
  }
  for (PyTypeObject* singleton : singleton_types) {
    if (tp == singleton) {  // dtype, layout and memory_format objects are process-wide singletons
      w.tag('o');
      w.ptr(v);
      return true;
    }
  }
  if (tp == &THPDeviceType) {
    const at::Device& device = reinterpret_cast<THPDevice*>(v)->device;
    w.tag('d');
    w.i64(int64_t(device.type()));
    w.i64(int64_t(device.index()));
    return true;
  }
  if (PyTuple_Check(v)) {  // tuple subclasses too (torch.Size, named tuples): the type is part of the key
    w.tag('(');
    w.ptr(tp);
    return encode_items(&PyTuple_GET_ITEM(v, 0), PyTuple_GET_SIZE(v), w, depth);
  }
  if (PyList_Check(v)) {
    w.tag('[');
    w.ptr(tp);
    return encode_items(PySequence_Fast_ITEMS(v), PyList_GET_SIZE(v), w, depth);
  }
  if (PyDict_Check(v)) {  // dict subclasses key as dict, as in the Python keyer
    w.tag('{');
    w.i64(int64_t(PyDict_GET_SIZE(v)));
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    while (PyDict_Next(v, &pos, &key, &item)) {
      if (Py_TYPE(key) != &PyUnicode_Type || !encode_str(key, w) || !encode(item, w, depth + 1)) return false;
    }
    return true;
  }
  return false;
}

PyObject* new_sample(PyObject* args, PyObject* kwargs) {
  PyObject* args_copy = PySequence_Tuple(args);
  if (args_copy == nullptr) return nullptr;
  PyObject* kwargs_copy = kwargs != nullptr ? PyDict_Copy(kwargs) : PyDict_New();
  if (kwargs_copy == nullptr) {
    Py_DECREF(args_copy);
    return nullptr;
  }
  PyObject* sample = PyTuple_Pack(2, args_copy, kwargs_copy);
  Py_DECREF(args_copy);
  Py_DECREF(kwargs_copy);
  return sample;
}

int64_t add_entry(FunctionSamples& samples, PyObject* args, PyObject* kwargs) {
  PyObject* sample = new_sample(args, kwargs);
  if (sample == nullptr) return -2;
  samples.entries.push_back(Entry{1, sample});
  return int64_t(samples.entries.size() - 1);
}

int64_t observe_python(FunctionSamples& samples, PyObject* args, PyObject* kwargs) {
  PyObject* empty = nullptr;
  if (kwargs == nullptr) kwargs = empty = PyDict_New();
  if (kwargs == nullptr) return -2;
  // the keyer's own ops (a nested tensor's unbind) are ours, not the pass's: hidden as if inside an op
  ThreadState& thread = thread_state();
  ++thread.op_depth;
  PyObject* key = PyObject_CallFunctionObjArgs(python_key, args, kwargs, nullptr);
  --thread.op_depth;
  int64_t index = -2;
  if (key != nullptr && (samples.by_python_key != nullptr || (samples.by_python_key = PyDict_New()) != nullptr)) {
    PyObject* found = PyDict_GetItemWithError(samples.by_python_key, key);
    if (found != nullptr) {
      index = PyLong_AsLongLong(found);
      ++samples.entries[size_t(index)].count;
    } else if (!PyErr_Occurred()) {
      index = add_entry(samples, args, empty != nullptr ? nullptr : kwargs);
      PyObject* value = index >= 0 ? PyLong_FromLongLong(index) : nullptr;
      if (value == nullptr || PyDict_SetItem(samples.by_python_key, key, value) < 0) index = -2;
      Py_XDECREF(value);
    }
  }
  Py_XDECREF(key);
  Py_XDECREF(empty);
  return index;
}

}  // namespace

bool samples_configure(PyObject* keyer, PyObject* singletons) {
  samples_clear();
  if (!PyTuple_Check(singletons) || PyTuple_GET_SIZE(singletons) != 3) {
    PyErr_SetString(PyExc_TypeError, "singletons must be (torch.dtype, torch.layout, torch.memory_format)");
    return false;
  }
  for (int i = 0; i < 3; ++i) singleton_types[i] = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(singletons, i));
  Py_XINCREF(keyer);
  Py_XSETREF(python_key, keyer);
  return true;
}

int64_t samples_observe(int32_t name_id, PyObject* args, PyObject* kwargs) {
  auto found = store.find(name_id);
  if (found == store.end()) {
    found = store.emplace(name_id, FunctionSamples()).first;
    order.push_back(name_id);
  }
  FunctionSamples& samples = found->second;
  Writer w;
  bool known = encode(args, w, 0);
  if (known) {
    w.tag('|');
    if (kwargs != nullptr) {
      known = encode(kwargs, w, 0);
    } else {
      w.tag('{');
      w.i64(0);
    }
  }
  if (!known) return observe_python(samples, args, kwargs);
  auto hit = samples.by_key.find(w.out);
  if (hit != samples.by_key.end()) {
    ++samples.entries[size_t(hit->second)].count;
    return hit->second;
  }
  int64_t index = add_entry(samples, args, kwargs);
  if (index >= 0) samples.by_key.emplace(std::move(w.out), index);
  return index;
}

PyObject* samples_take() {
  PyObject* result = PyDict_New();
  if (result == nullptr) return nullptr;
  for (int32_t name_id : order) {
    FunctionSamples& samples = store[name_id];
    PyObject* rows = PyList_New(Py_ssize_t(samples.entries.size()));
    PyObject* key = PyLong_FromLong(name_id);
    bool ok = rows != nullptr && key != nullptr;
    for (size_t i = 0; ok && i < samples.entries.size(); ++i) {
      PyObject* row = Py_BuildValue("(LO)", (long long)samples.entries[i].count, samples.entries[i].sample);
      if (row == nullptr) ok = false;
      else PyList_SET_ITEM(rows, Py_ssize_t(i), row);
    }
    ok = ok && PyDict_SetItem(result, key, rows) == 0;
    Py_XDECREF(rows);
    Py_XDECREF(key);
    if (!ok) {
      Py_DECREF(result);
      return nullptr;
    }
  }
  samples_clear();
  return result;
}

void samples_clear() {
  for (auto& item : store) {
    for (Entry& entry : item.second.entries) Py_DECREF(entry.sample);
    Py_XDECREF(item.second.by_python_key);
  }
  store.clear();
  order.clear();
}

PyObject* py_sample_key_bytes(PyObject*, PyObject* value) {
  Writer w;
  if (!encode(value, w, 0)) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(w.out.data(), Py_ssize_t(w.out.size()));
}

}  // namespace aitune
