// SPDX-License-Identifier: Apache-2.0
#include "array_views.h"


#include "memory_overlap.h"
#include "pasa/error.h"
#include "text/format.h"

namespace nb = nanobind;

namespace pasa::python {
namespace {

using nb::dlpack::dtype_code;

constexpr int kDLCPU = 1;   // DLPack device types
constexpr int kDLCUDA = 2;

Device pasa_device(const ArrayInfo& a, const char* name) {
  if (a.device_type == kDLCPU) return Device::cpu;
  if (a.device_type == kDLCUDA) return Device::cuda;
  throw Error(text::format("{}: arrays on {} are not supported (pasa takes host arrays and CUDA "
                           "device arrays)", name, device_text(a)));
}

}  // namespace

Layout parse_layout(const std::string& text) {
  if (text == "bhsd") return Layout::bhsd;
  if (text == "bshd") return Layout::bshd;
  throw Error("layout: '" + text + "' is not 'bhsd' ([B, H, S, D]) or 'bshd' ([B, S, H, D])");
}

std::string dtype_text(nb::dlpack::dtype dtype) {
  std::string base;
  switch (static_cast<dtype_code>(dtype.code)) {
    case dtype_code::Int: base = "int"; break;
    case dtype_code::UInt: base = "uint"; break;
    case dtype_code::Float: base = "float"; break;
    case dtype_code::Bfloat: base = "bfloat"; break;
    case dtype_code::Complex: base = "complex"; break;
    case dtype_code::Bool: return "bool";
    default: return text::format("dlpack dtype (code {}, {} bits)", dtype.code, dtype.bits);
  }
  std::string text = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) text += text::format(" x{} lanes", dtype.lanes);
  return text;
}

std::optional<DType> pasa_dtype(nb::dlpack::dtype dtype) {
  if (dtype.lanes != 1) return std::nullopt;
  if (dtype.code == static_cast<std::uint8_t>(dtype_code::Float)) {
    if (dtype.bits == 32) return DType::f32;
    if (dtype.bits == 16) return DType::f16;
  }
  if (dtype.code == static_cast<std::uint8_t>(dtype_code::Bfloat) && dtype.bits == 16) {
    return DType::bf16;
  }
  return std::nullopt;
}

std::string shape_text(const ArrayInfo& a) {
  std::string text = "(";
  for (std::size_t i = 0; i < a.ndim; ++i) {
    text += (i ? ", " : "") + std::to_string(a.shape[i]);
  }
  return text + (a.ndim == 1 ? ",)" : ")");
}

std::string device_text(const ArrayInfo& a) {
  switch (a.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return text::format("cuda:{}", a.device_id);
    case 3: return "cuda pinned host memory (DLPack kDLCUDAHost)";
    case 13: return "cuda managed memory (DLPack kDLCUDAManaged)";
    default: return text::format("DLPack device type {}", a.device_type);
  }
}

TensorView attention_view(const ArrayInfo& a, const char* name, Layout layout) {
  const char* dims = layout == Layout::bhsd ? "[B, H, S, D]" : "[B, S, H, D]";
  const char* layout_name = layout == Layout::bhsd ? "bhsd" : "bshd";
  if (a.ndim != 4) {
    throw Error(text::format("{}: expected a 4-D array {} (layout '{}'), got {}-D with shape {}", name,
                             dims, layout_name, a.ndim, shape_text(a)));
  }
  const std::optional<DType> dtype = pasa_dtype(a.dtype);
  if (!dtype) {
    throw Error(text::format("{}: unsupported dtype {} (pasa takes float32, float16 or bfloat16)", name,
                             dtype_text(a.dtype)));
  }
  const Device device = pasa_device(a, name);
  bool empty = false;  // an empty array's strides mean nothing; the C++ API names the zero size
  for (int i = 0; i < 4; ++i) empty = empty || a.shape[i] == 0;
  if (!empty && a.shape[3] > 1 && a.strides[3] != 1) {
    throw Error(text::format("{}: the head dim (last axis) must be contiguous, but its stride is {} "
                             "elements; make the array contiguous first (numpy.ascontiguousarray, "
                             "torch.Tensor.contiguous)", name, a.strides[3]));
  }
  const std::size_t size = dtype_size(*dtype);
  if (reinterpret_cast<std::uintptr_t>(a.data) % size != 0) {
    throw Error(text::format("{}: data pointer is not aligned to its {}-byte elements", name, size));
  }
  TensorView view;
  view.data = a.data;
  view.dtype = *dtype;
  view.device = device;
  // bhsd: the array is the view. bshd: swap the S and H axes of shape and strides.
  const int order[4] = {0, layout == Layout::bhsd ? 1 : 2, layout == Layout::bhsd ? 2 : 1, 3};
  for (int i = 0; i < 4; ++i) {
    view.shape[i] = a.shape[order[i]];
    view.stride[i] = a.strides[order[i]];
  }
  return view;
}

LseView lse_output_view(const ArrayInfo& a) {
  if (a.ndim != 3) {
    throw Error(text::format("lse: expected a 3-D array [B, H, S_q], got {}-D with shape {}", a.ndim,
                             shape_text(a)));
  }
  if (pasa_dtype(a.dtype) != DType::f32) {
    throw Error(text::format("lse: dtype is {}; the LSE output must be float32", dtype_text(a.dtype)));
  }
  if (reinterpret_cast<std::uintptr_t>(a.data) % 4 != 0) {
    throw Error("lse: data pointer is not aligned to 4 bytes");
  }
  LseView view;
  view.data = static_cast<float*>(a.data);
  view.device = pasa_device(a, "lse");
  for (int i = 0; i < 3; ++i) {
    view.shape[i] = a.shape[i];
    view.stride[i] = a.strides[i];
  }
  return view;
}

void check_same_device(const ArrayInfo& q, const ArrayInfo& a, const char* name) {
  if (q.device_type != a.device_type || q.device_id != a.device_id) {
    throw Error(text::format("{}: on {} but q is on {} (all arrays must be on one device)", name,
                             device_text(a), device_text(q)));
  }
}

namespace {

StridedMemory memory_of(const ArrayInfo& a) {
  return {a.data, (a.dtype.bits + 7) / 8, {a.shape, a.ndim}, {a.strides, a.ndim}};
}

}  // namespace

void check_no_overlap(const ArrayInfo& out, const char* name, const ArrayInfo& input,
                      const char* input_name) {
  if (out.device_type != input.device_type || out.device_id != input.device_id) return;
  check_apart(memory_of(out), name, memory_of(input), input_name);
}

void check_output_elements(const ArrayInfo& out, const char* name) {
  check_no_self_overlap(memory_of(out), name);
}

}  // namespace pasa::python
