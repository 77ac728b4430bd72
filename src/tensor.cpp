// SPDX-License-Identifier: Apache-2.0
// Tensor views, host tensors and dtype conversions.
#include "pasa/tensor.h"

#include <algorithm>
#include <array>
#include <limits>
#include <cstring>
#include <string>

#include "io/byte_io.h"
#include "pasa/error.h"
#include "pasa/format.h"
#include "storage_convert.h"

namespace pasa {

std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

namespace {

// "<name> [a, b, ...]: <what>", the error of a view whose strides or count would pass int64 (a stride
// that wrapped would make the view read other memory, and is undefined behaviour before that).
Error too_large(const char* name, std::initializer_list<std::int64_t> sizes, const char* what) {
  std::string text = std::string(name) + " [";
  for (const std::int64_t n : sizes) text += (text.back() == '[' ? "" : ", ") + std::to_string(n);
  return Error(text + "]: " + what);
}

}  // namespace

TensorView bhsd_view(void* data, DType dtype, std::int64_t B, std::int64_t H, std::int64_t S,
                     std::int64_t D, Device device) {
  std::int64_t sd = 0, hsd = 0;
  if (__builtin_mul_overflow(S, D, &sd) || __builtin_mul_overflow(H, sd, &hsd)) {
    throw too_large("bhsd_view", {B, H, S, D}, "its strides pass 2^63 elements");
  }
  return TensorView{data, dtype, {B, H, S, D}, {hsd, sd, D, 1}, device};
}

TensorView bshd_view(void* data, DType dtype, std::int64_t B, std::int64_t S, std::int64_t H,
                     std::int64_t D, Device device) {
  std::int64_t hd = 0, shd = 0;
  if (__builtin_mul_overflow(H, D, &hd) || __builtin_mul_overflow(S, hd, &shd)) {
    throw too_large("bshd_view", {B, S, H, D}, "its strides pass 2^63 elements");
  }
  return TensorView{data, dtype, {B, H, S, D}, {shd, D, hd, 1}, device};
}

LseView lse_view(float* data, std::int64_t B, std::int64_t H, std::int64_t S, Device device) {
  std::int64_t hs = 0;
  if (__builtin_mul_overflow(H, S, &hs)) throw too_large("lse_view", {B, H, S}, "its strides pass 2^63 elements");
  return LseView{data, {B, H, S}, {hs, S, 1}, device};
}

std::int64_t TensorView::numel() const {
  std::int64_t ab = 0, cd = 0, n = 0;
  if (__builtin_mul_overflow(shape[0], shape[1], &ab) || __builtin_mul_overflow(shape[2], shape[3], &cd) ||
      __builtin_mul_overflow(ab, cd, &n)) {
    throw too_large("a view of shape", {shape[0], shape[1], shape[2], shape[3]}, "its element count passes 2^63");
  }
  return n;
}

std::int64_t HostTensor::numel() const {
  for (std::int64_t d : shape) {
    if (d < 0) throw Error("HostTensor: dimension " + std::to_string(d) + " is negative");
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (n > std::numeric_limits<std::int64_t>::max() / d) throw Error("HostTensor: the shape's element count passes 2^63");
    n *= d;
  }
  return n;
}

namespace {

// The element count of a tensor whose bytes fill its shape exactly; throws pasa::Error naming `what`
// otherwise (a negative dimension, a size past 2^63, or too few or too many bytes: a view of them
// would be read out of bounds).
std::int64_t filled_numel(const HostTensor& t, const std::string& what) {
  const std::size_t needed = io::detail::checked_nbytes(t.shape, t.dtype, what);
  if (t.bytes.size() != needed) {
    throw Error(what + ": tensor holds " + std::to_string(t.bytes.size()) + " bytes, its shape needs " +
                std::to_string(needed));
  }
  return static_cast<std::int64_t>(needed / dtype_size(t.dtype));
}

}  // namespace

TensorView HostTensor::view(const std::string& what) {
  if (shape.size() != 4) {
    throw Error(what + ": expected a rank-4 tensor [B, H, S, D], got rank " +
                std::to_string(shape.size()));
  }
  filled_numel(*this, what);
  return bhsd_view(bytes.data(), dtype, shape[0], shape[1], shape[2], shape[3]);
}

std::vector<float> to_float(const HostTensor& t) {
  const std::int64_t n = filled_numel(t, "to_float");
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[i] = load_as_float(t.bytes.data(), t.dtype, i);
  return out;
}

HostTensor from_float(const std::vector<float>& values, std::vector<std::int64_t> shape, DType dtype) {
  HostTensor t{dtype, std::move(shape), {}};
  if (io::detail::checked_nbytes(t.shape, dtype, "from_float") != values.size() * dtype_size(dtype)) {
    throw Error("from_float: " + std::to_string(values.size()) + " values do not fill the shape");
  }
  t.bytes.resize(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) store_from_double(t.bytes.data(), dtype, i, values[i]);
  return t;
}

}  // namespace pasa
