// SPDX-License-Identifier: Apache-2.0
// The 8-bit codes of Q and K in the sage8 engine's Q K^T, as the small types its prepass (K) and
// mainloop (Q, the GEMM, the scores) take as a template parameter:
//   Int8QkCodes  the sage8 preset: INT8, int32 scores;
//   E4m3QkCodes  the sage_fp8 preset: e4m3, fp32 scores.
// Each says how a group's values become codes (x / scale, scale = max |x| / kMax), which wgmma
// multiplies them, and how a score accumulator becomes a float: as_float(acc) * scale + offset(scale)
// equals acc * scale, so a dequantized score and its exponent's argument are one FFMA either way.
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "cuda/arch/wgmma.cuh"
#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

// Two or four floats to e4m3 (rounded to nearest, saturated at 448), first in the lowest byte: Q and
// K's codes under sage_fp8, and the mainloop's P~.
__device__ __forceinline__ std::uint32_t pack_e4m3(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ std::uint32_t pack_e4m3(float a, float b, float c, float d) {
  return pack_e4m3(a, b) | (pack_e4m3(c, d) << 16);
}

struct Int8QkCodes {
  static constexpr float kMax = 127.0f;
  using Acc = int;

  // The INT8 bytes of x * inv, packed from byte 0 up. With inv = 127 / max |x|, |x inv| <= 127 (1 +
  // 2^-22) rounds to at most 127, so the conversion's saturation to -128..127 gives the clamp to
  // -127..127 SageAttention2 asks for. (cvt.pack: byte 1 from its first operand, byte 0 from its
  // second, the third shifted up by 16.)
  template <int kN>
  __device__ __forceinline__ static std::uint32_t pack(const float (&x)[kN], float inv) {
    static_assert(kN == 2 || kN == 4);
    int q[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) q[j] = __float2int_rn(x[j] * inv);
    std::uint32_t high = 0, packed;
    if constexpr (kN == 4) asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, 0;" : "=r"(high) : "r"(q[3]), "r"(q[2]));
    asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, %3;" : "=r"(packed) : "r"(q[1]), "r"(q[0]), "r"(high));
    return packed;
  }

  __device__ __forceinline__ static void mma_ss(int (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b, bool acc) {
    wgmma_s8_m64n128k32_ss(d, desc_a, desc_b, acc);
  }

  // An int32 accumulator x with |x| < 2^22 (|x| <= 127 * 127 * D here) as a float in one integer add:
  // x + 1.5 * 2^23 read as a float is exact and equals 1.5 * 2^23 + x, so x * scale + c is one FFMA of
  // it with the bias c - 1.5 * 2^23 * scale (I2F, a quarter-rate instruction, and FMUL would take two).
  // Rounding the bias to fp32 leaves an absolute error of at most half a unit of the bias's last place,
  // far below the INT8 quantization error of the dot product.
  static constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23, bit pattern 0x4B400000
  __device__ __forceinline__ static float as_float(int x) {
    return __int_as_float(static_cast<int>(static_cast<std::uint32_t>(x) + 0x4B400000u));
  }
  __device__ __forceinline__ static float offset(float scale) { return -kMagic * scale; }

  // A score masked out of the softmax: below every INT8 dot product, so integer maxima skip it, and
  // its magic float is -inf (bits 0xFF800000), so its exponential comes out 0 with no test.
  static constexpr int kMasked = static_cast<int>(0xFF800000u - 0x4B400000u);
  __device__ __forceinline__ static int max(int a, int b) { return ::max(a, b); }
};

struct E4m3QkCodes {
  static constexpr float kMax = 448.0f;
  using Acc = float;

  // The e4m3 bytes of x * inv, packed from byte 0 up.
  template <int kN>
  __device__ __forceinline__ static std::uint32_t pack(const float (&x)[kN], float inv) {
    static_assert(kN == 2 || kN == 4);
    if constexpr (kN == 2) {
      return pack_e4m3(x[0] * inv, x[1] * inv);
    } else {
      return pack_e4m3(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
    }
  }

  __device__ __forceinline__ static void mma_ss(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b, bool acc) {
    wgmma_e4m3_m64n128k32_ss(d, desc_a, desc_b, acc);
  }

  __device__ __forceinline__ static float as_float(float x) { return x; }
  __device__ __forceinline__ static float offset(float) { return 0.0f; }

  // -inf: maxima skip it and its exponential is 0 (the scales are positive).
  static constexpr float kMasked = -INFINITY;
  __device__ __forceinline__ static float max(float a, float b) { return fmaxf(a, b); }
};

// Host side: launch.template operator()<Codes>() for the request's QkCodes.
template <class Launch>
void dispatch_qk_codes(QkCodes codes, Launch&& launch) {
  if (codes == QkCodes::e4m3) {
    launch.template operator()<E4m3QkCodes>();
  } else {
    launch.template operator()<Int8QkCodes>();
  }
}

}  // namespace pasa::cuda
