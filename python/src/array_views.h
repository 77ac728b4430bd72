// SPDX-License-Identifier: Apache-2.0
// From DLPack arrays (nanobind ndarrays: numpy, torch, cupy, jax, ...) to pasa's tensor views, with
// every check whose message should name the caller's argument: rank, dtype, device, strides,
// alignment. The C++ API then checks what relates the arrays to each other.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <string>

#include "pasa/tensor.h"

namespace pasa::python {

using InputArray = nanobind::ndarray<nanobind::ro>;  // read: q, k, v, tensors to save
using OutputArray = nanobind::ndarray<>;             // written: o, lse

// How the caller's 4-D arrays are ordered. bshd arrays are [B, S, H, D]; their views are permuted
// to pasa's [B, H, S, D] through the strides, so no data moves.
enum class Layout { bhsd, bshd };
Layout parse_layout(const std::string& text);  // throws pasa::Error naming `layout`

// What pasa needs to know of an ndarray, independent of its read-only flag.
struct ArrayInfo {
  void* data = nullptr;
  nanobind::dlpack::dtype dtype{};
  std::size_t ndim = 0;
  const std::int64_t* shape = nullptr;
  const std::int64_t* strides = nullptr;  // in elements
  int device_type = 0;
  int device_id = 0;
};

template <class Array>
ArrayInfo array_info(const Array& a) {
  return ArrayInfo{const_cast<void*>(static_cast<const void*>(a.data())),
                   a.dtype(),
                   a.ndim(),
                   a.shape_ptr(),
                   a.stride_ptr(),
                   a.device_type(),
                   a.device_id()};
}

// "float64", "int32", "bfloat16", ...: the dtype as the user's framework would spell it.
std::string dtype_text(nanobind::dlpack::dtype dtype);
// f32, f16 or bf16; empty for anything else.
std::optional<DType> pasa_dtype(nanobind::dlpack::dtype dtype);
// "(2, 3, 4)": a shape as Python prints it.
std::string shape_text(const ArrayInfo& a);
// "cpu", "cuda:0", ...
std::string device_text(const ArrayInfo& a);

// The [B, H, S, D] view of a 4-D attention operand (q, k, v or o) in the given layout. Throws
// pasa::Error naming `name` for a rank other than 4, an unsupported dtype or device, a head dim that
// is not contiguous (stride 1), or a misaligned data pointer.
TensorView attention_view(const ArrayInfo& a, const char* name, Layout layout);

// The [B, H, S_q] float32 view of an LSE output.
LseView lse_output_view(const ArrayInfo& a);

// Throws pasa::Error unless `a` is on the same device (type and index) as `q`.
void check_same_device(const ArrayInfo& q, const ArrayInfo& a, const char* name);

// Throws pasa::Error naming `name` if the bytes output `out` spans overlap those of `input`: the
// backends read the inputs while writing the output, so aliasing would give garbage (memory_overlap.h).
void check_no_overlap(const ArrayInfo& out, const char* name, const ArrayInfo& input,
                      const char* input_name);

// Throws pasa::Error naming `name` unless every index of output `out` addresses its own element (a
// stride of 0 on a dimension longer than 1 would lose results; memory_overlap.h states the rule).
void check_output_elements(const ArrayInfo& out, const char* name);

}  // namespace pasa::python
