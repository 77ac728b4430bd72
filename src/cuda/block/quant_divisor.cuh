// SPDX-License-Identifier: Apache-2.0
// x * num / den for the sage8 prepass's quantizers (an INT8 or FP8 value of x / scale) with one multiply
// a value, and right where num / den overflows: bf16 inputs hold maxima and scales below num / FLT_MAX
// (about 3.7e-37 for INT8's 127 over a group's max |x|), whose reciprocal would be inf (x * inf: a sign,
// and NaN for 0).
#pragma once

namespace pasa::cuda {

// (x * pre) * inv = x * num / den: pre = 1 where num / den is a finite float; else pre = 2^64 (x * pre is
// exact) and inv = num / (den * 2^64). den = 0 (an all-zero group or channel) gives inv = 0. A
// quantizer branches on pre == 1, so that the common case keeps one multiply a value.
struct Divisor {
  float pre, inv;
};

__device__ __forceinline__ Divisor divisor_of(float num, float den) {
  if (den == 0.0f) return {1.0f, 0.0f};
  const float pre = den < 0x1p-64f ? 0x1p64f : 1.0f;
  return {pre, num / (den * pre)};
}

}  // namespace pasa::cuda
