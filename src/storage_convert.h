// SPDX-License-Identifier: Apache-2.0
// Element access to f32 / f16 / bf16 storage as float or double, shared by the CPU backends and I/O.
// Loads are exact (every f16 and bf16 value is a float); stores round to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

#include "pasa/tensor.h"

namespace pasa {

// f16 -> float by table: 65536 entries, built once, exact.
float f16_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_f16_bits(double x);
std::uint16_t float_to_bf16_bits(double x);

inline float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

// Element i (in elements from base) of a buffer of the given dtype.
inline float load_as_float(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f32: {
      float f;
      std::memcpy(&f, static_cast<const char*>(base) + 4 * i, 4);
      return f;
    }
    case DType::f16: {
      std::uint16_t b;
      std::memcpy(&b, static_cast<const char*>(base) + 2 * i, 2);
      return f16_bits_to_float(b);
    }
    case DType::bf16: {
      std::uint16_t b;
      std::memcpy(&b, static_cast<const char*>(base) + 2 * i, 2);
      return bf16_bits_to_float(b);
    }
  }
  return 0.0f;
}

inline void store_from_double(void* base, DType dtype, std::int64_t i, double x) {
  char* p = static_cast<char*>(base);
  switch (dtype) {
    case DType::f32: {
      const float f = static_cast<float>(x);
      std::memcpy(p + 4 * i, &f, 4);
      return;
    }
    case DType::f16: {
      const std::uint16_t b = float_to_f16_bits(x);
      std::memcpy(p + 2 * i, &b, 2);
      return;
    }
    case DType::bf16: {
      const std::uint16_t b = float_to_bf16_bits(x);
      std::memcpy(p + 2 * i, &b, 2);
      return;
    }
  }
}

}  // namespace pasa
