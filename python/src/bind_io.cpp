// SPDX-License-Identifier: Apache-2.0
// pasa._core's file functions over include/pasa/io.h. Loads return NumPy arrays that own their
// bytes (bfloat16 is widened to float32: NumPy has no bfloat16); saves take any C-contiguous host
// DLPack array of float32, float16 or bfloat16. Paths are bytes (pasa._io gives os.fsencode's): a
// file name need not be UTF-8 text, which a str argument would have to be.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "array_views.h"
#include "bindings.h"
#include "io/atomic_file.h"
#include "memory_budget.h"
#include "pasa/error.h"
#include "pasa/io.h"
#include "pasa/plan.h"
#include "text/format.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace pasa::python {
namespace {

// `what` names the tensor in errors (its file, and its name in a .safetensors).
nb::object to_numpy(HostTensor&& tensor, const std::string& what) {
  if (tensor.dtype == DType::bf16) {
    // (the floats and their copy beside the bf16 bytes: 8 bytes an element more, at the peak)
    require_memory(saturating_product({static_cast<std::uint64_t>(tensor.numel()), 8}),
                   what + ": bfloat16 widened to float32");
    tensor = from_float(to_float(tensor), tensor.shape, DType::f32);
  }
  auto* owned = new HostTensor(std::move(tensor));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<HostTensor*>(p); });
  std::vector<std::size_t> shape(owned->shape.begin(), owned->shape.end());
  shape.reserve(1);  // a 0-d array still passes a valid (unused) shape pointer
  const nb::dlpack::dtype dtype{static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float),
                                static_cast<std::uint8_t>(8 * dtype_size(owned->dtype)), 1};
  return nb::ndarray<nb::numpy>(owned->bytes.data(), shape.size(), shape.data(), owner, nullptr, dtype)
      .cast();
}

// A copy of a host array as a C-ordered HostTensor; `what` names it in errors.
HostTensor from_array(const InputArray& array, const std::string& what) {
  const ArrayInfo a = array_info(array);
  const std::optional<DType> dtype = pasa_dtype(a.dtype);
  if (!dtype) {
    throw Error(text::format("{}: unsupported dtype {} (pasa files hold float32, float16 or bfloat16)",
                             what, dtype_text(a.dtype)));
  }
  if (a.device_type != 1) {
    throw Error(text::format("{}: array is on {}; copy it to the host first", what, device_text(a)));
  }
  HostTensor t;
  t.dtype = *dtype;
  // A zero-size array has no data to lay out: its strides mean nothing.
  const bool empty = std::any_of(a.shape, a.shape + a.ndim, [](std::int64_t n) { return n == 0; });
  std::int64_t expected = 1;  // C-order stride of axis i, in elements
  for (std::size_t i = a.ndim; i-- > 0 && !empty;) {
    if (a.shape[i] > 1 && a.strides[i] != expected) {
      throw Error(text::format("{}: array is not C-contiguous (shape {}); make it contiguous first",
                               what, shape_text(a)));
    }
    expected *= a.shape[i];
  }
  t.shape.assign(a.shape, a.shape + a.ndim);
  require_memory(saturating_product({static_cast<std::uint64_t>(t.numel()), dtype_size(t.dtype)}),
                 what + ": the copy written");
  t.bytes.resize(static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
  if (!t.bytes.empty()) std::memcpy(t.bytes.data(), a.data, t.bytes.size());
  return t;
}

std::string path_bytes(const nb::bytes& path) { return {path.c_str(), path.size()}; }

nb::object load_npy(const nb::bytes& path_arg) {
  const std::string path = path_bytes(path_arg);
  HostTensor t;
  {
    nb::gil_scoped_release release;
    t = io::read_npy(path);
  }
  return to_numpy(std::move(t), path);
}

// A tensor name as a Python str: all of its bytes (a NUL included), and a PasaError naming the file
// rather than a UnicodeDecodeError when they are not UTF-8.
nb::str name_text(const std::string& name, const std::string& path) {
  PyObject* text = PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), nullptr);
  if (text == nullptr) {
    PyErr_Clear();
    throw Error(text::format("{}: a tensor name is not valid UTF-8 text", path));
  }
  return nb::steal<nb::str>(text);
}

nb::dict load_safetensors(const nb::bytes& path_arg) {
  const std::string path = path_bytes(path_arg);
  std::map<std::string, HostTensor> tensors;
  {
    nb::gil_scoped_release release;
    tensors = io::read_safetensors(path);
  }
  nb::dict out;
  for (auto& [name, tensor] : tensors) {
    out[name_text(name, path)] = to_numpy(std::move(tensor), text::format("{}: tensor '{}'", path, name));
  }
  return out;
}

void save_npy(const nb::bytes& path_arg, const InputArray& array) {
  const std::string path = path_bytes(path_arg);
  const HostTensor t = from_array(array, path);
  nb::gil_scoped_release release;
  io::write_npy(path, t);
}

void save_safetensors(const nb::bytes& path_arg, const std::map<std::string, InputArray>& arrays) {
  const std::string path = path_bytes(path_arg);
  std::map<std::string, HostTensor> tensors;
  for (const auto& [name, array] : arrays) {
    tensors.emplace(name, from_array(array, text::format("{}: tensor '{}'", path, name)));
  }
  nb::gil_scoped_release release;
  io::write_safetensors(path, tensors);
}

// Text written whole or not at all, as the C++ writes its own files (a temporary next to the file,
// renamed over it; removed when a signal at its default action ends the process during the write):
// the Python side's files (a capture's index).
void save_text(const nb::bytes& path_arg, const std::string& text) {
  const std::string path = path_bytes(path_arg);
  nb::gil_scoped_release release;
  io::detail::write_text_atomically(path, text);
}

}  // namespace

void bind_io(nb::module_& m) {
  // A pasa calibrate plan (JSON text), read strictly by the C++ reader (errors name `origin`), as
  // (fast, accurate, xi, {call name: policy text}).
  m.def(
      "parse_plan",
      [](const std::string& text, const std::string& origin) {
        const MixPlan plan = parse_plan(text, origin);
        nb::dict entries;
        for (const auto& [key, policy] : plan.entries) {
          entries[nb::str(entry_name(key.first, key.second).c_str())] = policy;
        }
        return nb::make_tuple(plan.fast, plan.accurate, plan.xi, entries);
      },
      "text"_a, "origin"_a);
  m.def("load_npy", &load_npy, "path"_a);
  m.def("load_safetensors", &load_safetensors, "path"_a);
  m.def("save_npy", &save_npy, "path"_a, "array"_a);
  m.def("save_safetensors", &save_safetensors, "path"_a, "arrays"_a);
  m.def("save_text", &save_text, "path"_a, "text"_a);
}

}  // namespace pasa::python
