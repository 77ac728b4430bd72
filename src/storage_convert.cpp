// SPDX-License-Identifier: Apache-2.0
#include "storage_convert.h"

#include <array>

#include "pasa/format.h"

namespace pasa {

float f16_bits_to_float(std::uint16_t bits) {
  static const std::array<float, 65536> table = [] {
    std::array<float, 65536> t{};
    for (std::uint32_t b = 0; b < 65536; ++b) t[b] = static_cast<float>(decode_bits(Format::fp16(), b));
    return t;
  }();
  return table[bits];
}

std::uint16_t float_to_f16_bits(double x) {
  return static_cast<std::uint16_t>(encode_bits(Format::fp16(), x));
}

std::uint16_t float_to_bf16_bits(double x) {
  return static_cast<std::uint16_t>(encode_bits(Format::bf16(), x));
}

}  // namespace pasa
