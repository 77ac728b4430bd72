// SPDX-License-Identifier: Apache-2.0
// pasa/tensor.h — non-owning tensor views (what the attention API reads and writes) and an owning
// host tensor (what the file readers return).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pasa {

enum class DType { f32, f16, bf16 };
enum class Device { cpu, cuda };

std::size_t dtype_size(DType dtype);
std::string dtype_name(DType dtype);  // "f32", "f16", "bf16"

// A rank-4 view [B, H, S, D] with element strides, so BHSD and BSHD (and any other) layout works.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::array<std::int64_t, 4> shape{0, 0, 0, 0};   // [B, H, S, D]
  std::array<std::int64_t, 4> stride{0, 0, 0, 0};  // in elements
  Device device = Device::cpu;

  std::int64_t batch() const { return shape[0]; }
  std::int64_t heads() const { return shape[1]; }
  std::int64_t seq() const { return shape[2]; }
  std::int64_t dim() const { return shape[3]; }
  std::int64_t numel() const;  // (pasa::Error where the count passes 2^63)
  std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) const {
    return b * stride[0] + h * stride[1] + s * stride[2] + d * stride[3];
  }
};

// Views over a contiguous buffer in the two common layouts (pasa::Error where a stride would pass 2^63
// elements).
TensorView bhsd_view(void* data, DType dtype, std::int64_t B, std::int64_t H, std::int64_t S,
                     std::int64_t D, Device device = Device::cpu);
TensorView bshd_view(void* data, DType dtype, std::int64_t B, std::int64_t S, std::int64_t H,
                     std::int64_t D, Device device = Device::cpu);

// The LSE output: fp32 [B, H, S_q] with element strides (lse_view: pasa::Error as bhsd_view).
struct LseView {
  float* data = nullptr;
  std::array<std::int64_t, 3> shape{0, 0, 0};
  std::array<std::int64_t, 3> stride{0, 0, 0};
  Device device = Device::cpu;
};
LseView lse_view(float* data, std::int64_t B, std::int64_t H, std::int64_t S,
                 Device device = Device::cpu);

// An owning, C-ordered host tensor of any rank: what .npy/.safetensors files hold.
struct HostTensor {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;  // numel * dtype_size, little-endian, C order

  std::int64_t numel() const;  // (pasa::Error for a negative dimension or a count past 2^63)
  // A [B, H, S, D] view of this tensor; throws pasa::Error (naming `what`) unless it has rank 4 and
  // its bytes fill its shape exactly.
  TensorView view(const std::string& what);
};

// Element-wise conversions between host buffers of any supported dtype and float (exact for widening,
// round-to-nearest-even for narrowing). Both throw pasa::Error when the bytes (or values) do not fill
// the shape, or the shape has a negative dimension or more than 2^63 bytes.
std::vector<float> to_float(const HostTensor& t);
HostTensor from_float(const std::vector<float>& values, std::vector<std::int64_t> shape, DType dtype);

}  // namespace pasa
