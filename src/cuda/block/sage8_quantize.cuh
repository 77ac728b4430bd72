// SPDX-License-Identifier: Apache-2.0
// The sage8 prepass's quantizers and statistics (sage8_prepare.cu runs them in both of its forms): a
// warp's INT8 or e4m3 group of K - mean, a thread's FP8 quad of V / scale in the transposed, key-permuted
// stage layout (sage8_stage.cuh), from rows in global memory (the caller's K or V) or in shared memory
// (a clustered CTA's copy), and the statistics they take (smooth K's mean, V's per-channel scale).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/arch/wgmma.cuh"
#include "cuda/block/quant_divisor.cuh"
#include "cuda/block/sage8_qk_codes.cuh"
#include "cuda/block/sage8_stage.cuh"
#include "cuda/host/kernel_params.h"

namespace pasa::cuda::sage8_quantize {

constexpr int kBlockKv = kSage8BlockKv;  // 128
constexpr int kElemBytes = 2;            // f16 or bf16 inputs

// One 16-bit element as a float. (K's quantization reads its four or two channels a lane this way:
// measured faster than one 8- or 4-byte load a lane, bench/NOTES.md.)
template <typename Elem>
__device__ __forceinline__ float load_in(const void* base, std::int64_t idx) {
  return static_cast<float>(static_cast<const Elem*>(base)[idx]);
}

// 8 consecutive 16-bit elements at p (16-byte aligned: rows are, cuda_attention.cpp checks it) as floats.
template <typename Elem>
__device__ __forceinline__ void load_8(const Elem* p, float (&x)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const Elem* e = reinterpret_cast<const Elem*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = static_cast<float>(e[i]);
}

__device__ __forceinline__ std::int64_t elem_index(const Operand& op, int b, int h, int s, int d) {
  return b * op.stride_b + h * op.stride_h + static_cast<std::int64_t>(s) * op.stride_s + d;
}

// Where the quantizers read a head's keys from: at(key, d) one element, load8(key, d0, x) channels
// d0 .. d0 + 7 (d0 a multiple of 8), key the head's key index.
template <typename Elem>
struct GlobalRows {  // the caller's K or V
  static constexpr bool kShared = false;
  Operand op;
  int b, h;
  __device__ float at(int key, int d) const { return load_in<Elem>(op.data, elem_index(op, b, h, key, d)); }
  __device__ void load8(int key, int d0, float (&x)[8]) const {
    load_8(static_cast<const Elem*>(op.data) + elem_index(op, b, h, key, d0), x);
  }
};

// A clustered CTA's copy of keys key0, key0 + 1, ...: rows of D elements whose 16-byte chunks are
// XOR-swizzled by the row's low three bits, so that V's quantizer, which reads one chunk of rows 2 and
// 8 apart, meets at most two rows a bank group (eight unswizzled).
template <typename Elem, int D>
struct SharedRows {
  static constexpr bool kShared = true;
  Elem* base;
  int key0;
  __device__ static int offset(int row, int d) { return row * D + ((d / 8) ^ (row & 7)) * 8 + d % 8; }
  __device__ float at(int key, int d) const { return static_cast<float>(base[offset(key - key0, d)]); }
  __device__ void load8(int key, int d0, float (&x)[8]) const { load_8(base + offset(key - key0, d0), x); }
};

// ---- the quantizers (both forms) ------------------------------------------------------------------

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// One warp: the group of key block kb whose rows are w, w + 8, ..., w + 120 (one scale), in Codes
// (sage8_qk_codes.cuh), after
// subtracting K's mean (`mean`: this lane's D / 32 channels). Padding keys (>= seq_kv) are zeros. The
// differences are taken halved, k / 2 - mean / 2 (one rounding, as K - mean halved wherever that is a
// normal number), and the scale doubled: K - mean reaches twice fp32's largest value where keys of
// both signs are near it, and the bytes, ratios to the group's max, are the same either way.
template <class Codes, int D, class Rows>
__device__ __forceinline__ void sage_quantize_k_group(const Rows& rows, int kb, int w, const float (&mean)[D / 32],
                                                      std::int64_t bh, int seq_kv, const Sage8Scratch& s) {
  constexpr int kCols = D / 32;
  constexpr int kGroupRows = kBlockKv / 8;
  // Rows from global memory are read once and held; from shared memory, read again (fewer registers).
  constexpr bool kHold = !Rows::kShared;
  const int lane = threadIdx.x % 32;
  auto value = [&](int i, int j) {
    const int key = kb * kBlockKv + w + 8 * i;
    return key < seq_kv ? fmaf(rows.at(key, lane * kCols + j), 0.5f, -0.5f * mean[j]) : 0.0f;
  };
  float held[kHold ? kGroupRows : 1][kCols];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kGroupRows; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const float x = value(i, j);
      if constexpr (kHold) held[i][j] = x;
      amax = fmaxf(amax, fabsf(x));
    }
  }
  amax = warp_max(amax);
  if (lane == 0) s.k_scale[(bh * s.n_kb + kb) * 8 + w] = amax / Codes::kMax * 2.0f;  // (amax of the halves)
  const Divisor div = divisor_of(Codes::kMax, amax);  // (warp-uniform, as amax)
  const auto quantize_rows = [&](float pre) {
#pragma unroll
    for (int i = 0; i < kGroupRows; ++i) {
      float x[kCols];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if constexpr (kHold) {
          x[j] = held[i][j] * pre;
        } else {
          x[j] = value(i, j) * pre;
        }
      }
      const std::uint32_t packed = Codes::pack(x, div.inv);
      std::uint8_t* dst = s.tiles + (bh * s.n_kb + kb) * SageStage<D>::kBytes +
                          swizzled_offset<D>((w + 8 * i) * D + lane * kCols);
      if constexpr (kCols == 4) {
        *reinterpret_cast<std::uint32_t*>(dst) = packed;
      } else {
        *reinterpret_cast<std::uint16_t*>(dst) = static_cast<std::uint16_t>(packed);
      }
    }
  };
  if (div.pre == 1.0f) {
    quantize_rows(1.0f);  // (x * 1 folds away)
  } else {
    quantize_rows(div.pre);
  }
}

// Where key p (0..15) of a 16-key chunk is stored: the softmax's C fragment gives thread t of a row the
// keys 2t, 2t + 1 (n-tile 0) and 8 + 2t, 9 + 2t (n-tile 1); the PV MMA's A fragment wants its four
// bytes at positions 4t .. 4t + 3. So key p goes to 4 ((p % 8) / 2) + (p & 1) + 2 (p / 8).

// The e4m3 bytes of a / scale (byte 0) and b / scale (byte 1), given the divisor_of(1, scale) as pre
// and inv: one conversion for the two.
__device__ __forceinline__ std::uint32_t fp8x2_of(float a, float b, float pre, float inv) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a * pre * inv, b * pre * inv), __NV_SATFINITE, __NV_E4M3);
}

// The statistics both forms leave: smooth K's column mean from the column's sum over all keys, V's
// per-channel scale from max |V|.
// K's column sums are taken of x * kSumScale (one fma a value: exact, and the same rounding as the sum
// of x, wherever |x| >= 2^-94), so that bf16 keys near their largest value (3.4e38) cannot overflow fp32
// in a sum of up to 2^31 of them; the mean scales back in double.
constexpr float kSumScale = 0x1p-32f;
__device__ __forceinline__ float k_mean_of(double scaled_sum, int seq_kv) {
  return static_cast<float>(scaled_sum * 0x1p32 / seq_kv);
}
__device__ __forceinline__ float v_scale_of(float vmax) { return vmax / 448.0f; }

// V / v_scale to e4m3 for quarter m of 16-key chunk `chunk` of key block kb and channels d0 .. d0 + 7
// (`inv`: their 1 / scale), transposed into [D][keys] with the keys of the chunk permuted as above:
// keys 2m, 2m + 1, 2m + 8, 2m + 9 land in the four bytes at 4m, so one 32-bit word per channel, no
// transposition through shared memory. Padding keys are zeros.
constexpr int kChunks = kBlockKv / 16;
constexpr int kQuads = 4 * kChunks;  // (m, chunk) pairs of a key block

template <int D, class Rows>
__device__ __forceinline__ void sage_quantize_v_quad(const Rows& rows, int kb, int m, int chunk, int d0,
                                                     const Divisor (&div)[8], std::int64_t bh, int seq_kv,
                                                     const Sage8Scratch& s) {
  const int base = kb * kBlockKv + chunk * 16;
  const int keys[4] = {base + 2 * m, base + 2 * m + 1, base + 2 * m + 8, base + 2 * m + 9};
  std::uint8_t* v_tile = s.tiles + (bh * s.n_kb + kb) * SageStage<D>::kBytes + SageStage<D>::kKBytes;
  const auto quantize = [&](const float (&pre)[8]) {
    std::uint32_t word[8];
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {  // keys 0 and 1 into bytes 0 and 1, then 2 and 3 into 2 and 3
      float x[2][8];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (keys[2 * pair + i] < seq_kv) {
          rows.load8(keys[2 * pair + i], d0, x[i]);
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) x[i][j] = 0.0f;  // (fp8 zero is the zero byte)
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const std::uint32_t bytes = fp8x2_of(x[0][j], x[1][j], pre[j], div[j].inv);
        word[j] = pair == 0 ? bytes : word[j] | bytes << 16;
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      *reinterpret_cast<std::uint32_t*>(v_tile + swizzled_offset<kBlockKv>((d0 + j) * kBlockKv + chunk * 16 + 4 * m)) =
          word[j];
    }
  };
  bool scaled = false;
  float pre[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    pre[j] = div[j].pre;
    scaled |= pre[j] != 1.0f;
  }
  if (scaled) {
    quantize(pre);
  } else {
    const float ones[8] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    quantize(ones);  // (x * 1 folds away)
  }
}

}  // namespace pasa::cuda::sage8_quantize
