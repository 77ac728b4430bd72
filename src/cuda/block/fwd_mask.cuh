// SPDX-License-Identifier: Apache-2.0
// What the forward kernels do to the scores before the softmax: the causal, sliding-window and
// sequence-end masks, the logit softcap and the attention mask, on a warp's scores in the mma.sync C
// layout (exact: fp32) or as fp16 pairs in the A-fragment layout (pasa), which the wgmma accumulator
// layout of one warp's 16 rows repeats: thread (g = lane / 4, t = lane % 4) holds rows
// row_lo + 16 mt + 8 i and keys n0 + 8 n + 2 t + e.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/arch/ptx.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

// The keys row `row` sees are [visible_first, visible_limit): the causal diagonal, the sliding window
// around it and the sequence end (the limit can be <= the first key, or negative: none).
__device__ __forceinline__ int visible_first(const FwdParams& p, int row) {
  return p.window_left >= 0 ? max(0, row + p.causal_offset - p.window_left) : 0;
}
__device__ __forceinline__ int visible_limit(const FwdParams& p, int row) {
  int limit = p.seq_kv;
  if (p.causal) limit = min(limit, row + p.causal_offset + 1);
  if (p.window_right >= 0) limit = min(limit, row + p.causal_offset + p.window_right + 1);
  return limit;
}

// Where a portable kernel's CTA and thread sit: one CTA per (query block of block_m rows, query head,
// batch) on grid (query blocks, H_q, B), causal blocks launched last first (the longest first).
struct PortableCta {
  int warp, lane;
  int h, b, h_kv;
  int m0;  // the block's first row
};
__device__ __forceinline__ PortableCta portable_cta(const FwdParams& p, int block_m) {
  const int m_block = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  return {static_cast<int>(threadIdx.x) / 32, static_cast<int>(threadIdx.x) % 32, h, static_cast<int>(blockIdx.z),
          h / p.group, m_block * block_m};
}

// The key blocks (of `block` keys, n_kb of them) that rows [r0, r0 + rows) of a CTA visit end here:
// the blocks past the last row's limit are left out. (Both bounds grow with the row.)
__device__ __forceinline__ int visited_key_blocks(const FwdParams& p, int r0, int rows, int block, int n_kb) {
  if (!p.causal && p.window_right < 0) return n_kb;
  const int last = visible_limit(p, min(r0 + rows - 1, p.seq_q - 1)) - 1;
  return last < 0 ? 0 : min(n_kb, last / block + 1);
}

// ... and begin here: the blocks before the first row's window are left out.
__device__ __forceinline__ int first_key_block(const FwdParams& p, int r0, int block) {
  return visible_first(p, r0) / block;
}

// Which key blocks some of the rows [row_lo, row_lo + rows) see only in part: a block [key0, key0 +
// block) reaching past the first row's limit or starting before the last row's first key. Taken once
// per tile, a mainloop's test per block is two compares where block_needs_mask has ptxas rebuild both
// bounds from the parameters in constant memory every block; but the two bounds then stay live
// through the loop. Measured (bench/NOTES.md): faster for pasa, no gain for sage8 and exact at 240
// registers a thread and spills at 160, so only the pasa mainloop takes it.
struct PartialBlocks {
  int first_key, limit;
  __device__ __forceinline__ PartialBlocks(const FwdParams& p, int row_lo, int rows = 16)
      : first_key(visible_first(p, row_lo + rows - 1)), limit(visible_limit(p, row_lo)) {}
  __device__ __forceinline__ bool needs_mask(int key0, int block) const {
    return key0 + block > limit || key0 < first_key;
  }
};
__device__ __forceinline__ bool block_needs_mask(const FwdParams& p, int key0, int block, int row_lo, int rows = 16) {
  return PartialBlocks(p, row_lo, rows).needs_mask(key0, block);
}

// fp32 scores of keys outside [first_of(r), limit_of(r)) become -inf, for rows r = 2 mt + i (g, g + 8
// of m-tile mt; each called once per row, where the row's loop begins), keys from n0. The thread's keys
// are n0 + 2 t + c for the columns c = 8 n + e, so each row's bounds are taken relative to n0 + 2 t
// once and every score's test compares them with a constant: one ISETP and one FSEL a score (two ISETP
// with a lower bound), where absolute keys cost an add and a test per bound as well. kLower: whether
// there is a lower bound (a sliding window); without one, first_of is not called.
template <bool kLower, int kMTiles, int kNTiles, typename FirstOf, typename LimitOf>
__device__ __forceinline__ void mask_columns(float (&s)[kMTiles][kNTiles][4], int n0, FirstOf first_of,
                                             LimitOf limit_of) {
  const int key0 = n0 + 2 * (static_cast<int>(threadIdx.x) % 4);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int hi = limit_of(2 * mt + i) - key0;
      const int lo = kLower ? first_of(2 * mt + i) - key0 : 0;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = 8 * n + e;
          if (c >= hi || (kLower && c < lo)) s[mt][n][2 * i + e] = -INFINITY;
        }
      }
    }
  }
}

// Keys at or past limit_of(r) become -inf (every key from 0 is visible up to there).
template <int kMTiles, int kNTiles, typename LimitOf>
__device__ __forceinline__ void mask_past_limits(float (&s)[kMTiles][kNTiles][4], int n0, LimitOf limit_of) {
  mask_columns<false>(s, n0, [](int) { return 0; }, limit_of);
}

// exact: scores of keys a row may not see become -inf (the lower bound only with a sliding window).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void apply_mask(float (&s)[kMTiles][kNTiles][4], const FwdParams& p, int n0,
                                           int row_lo) {
  auto row = [&](int r) { return row_lo + 16 * (r / 2) + 8 * (r % 2); };
  auto first_of = [&](int r) { return visible_first(p, row(r)); };
  auto limit_of = [&](int r) { return visible_limit(p, row(r)); };
  if (p.window_left >= 0) {
    mask_columns<true>(s, n0, first_of, limit_of);
  } else {
    mask_columns<false>(s, n0, first_of, limit_of);
  }
}

// softcap tanh(x) of x = s alpha / softcap, as 1 - 2 / (e^2x + 1) on the special-function unit (about
// 2 fp32 ulp of the result's scale; e^2x = inf gives 1, 0 gives -1).
__device__ __forceinline__ float soft_cap(float s, float softcap, float scale_over_cap) {
  const float e = fast_exp2(2.0f * kLog2e * scale_over_cap * s);
  return softcap * (1.0f - __fdividef(2.0f, e + 1.0f));
}

// The logit softcap (FwdParams::softcap > 0) on raw fp32 scores in the mma C layout: they leave it
// scaled and capped (the softmax then scales by log2(e) alone).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void apply_softcap(float (&s)[kMTiles][kNTiles][4], const FwdParams& p) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][n][e] = soft_cap(s[mt][n][e], p.softcap, p.softcap_scale);
    }
  }
}

// A score plus an additive mask value: -inf hides the key (as does a score already hidden), a finite
// value takes the score no lower than FwdParams::mask_floor.
__device__ __forceinline__ float add_mask_value(float x, float value, const FwdParams& p) {
  return value == -INFINITY || x == -INFINITY ? -INFINITY : fmaxf(x + value * p.mask_scale, p.mask_floor);
}

// The attention mask (FwdParams::mask) on fp32 scores in the mma C layout: rows row_lo + 16 mt + 8 i
// of head (b, h), keys from n0 (keys at or past seq_kv are left alone: apply_mask hides them).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void apply_attn_mask(float (&s)[kMTiles][kNTiles][4], const FwdParams& p, int b, int h,
                                                int n0, int row_lo) {
  const int t = static_cast<int>(threadIdx.x) % 4;
  const char* base = static_cast<const char*>(p.mask);
  const int elem = p.mask_type == MaskType::boolean ? 1 : p.mask_type == MaskType::add_f32 ? 4 : 2;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = min(row_lo + 16 * mt + 8 * i, p.seq_q - 1);  // (rows past the end are not stored)
      const char* row_base = base + (b * p.mask_stride_b + h * p.mask_stride_h +
                                     static_cast<std::int64_t>(row) * p.mask_stride_s) * elem;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = n0 + 8 * n + 2 * t + e;
          if (key >= p.seq_kv) continue;
          const char* at = row_base + static_cast<std::int64_t>(key) * p.mask_stride_k * elem;
          float& x = s[mt][n][2 * i + e];
          switch (p.mask_type) {
            case MaskType::boolean:
              if (__ldg(reinterpret_cast<const unsigned char*>(at)) == 0) x = -INFINITY;
              break;
            case MaskType::add_f32: x = add_mask_value(x, __ldg(reinterpret_cast<const float*>(at)), p); break;
            case MaskType::add_f16:
              x = add_mask_value(x, __half2float(__ldg(reinterpret_cast<const __half*>(at))), p);
              break;
            case MaskType::add_bf16:
              x = add_mask_value(x, __bfloat162float(__ldg(reinterpret_cast<const __nv_bfloat16*>(at))), p);
              break;
            case MaskType::none: break;
          }
        }
      }
    }
  }
}

// pasa: the same on fp16 pairs in the A-fragment layout (tile n, row i: s[mt][n / 2][2 (n % 2) + i]),
// the bounds relative to the thread's first key as above.
template <int kMTiles, int kNChunks>
__device__ __forceinline__ void apply_mask(std::uint32_t (&s)[kMTiles][kNChunks][4], const FwdParams& p,
                                           int n0, int row_lo) {
  const int key0 = n0 + 2 * (static_cast<int>(threadIdx.x) % 4);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int hi = visible_limit(p, row_lo + 16 * mt + 8 * i) - key0;
#pragma unroll
      for (int n = 0; n < 2 * kNChunks; ++n) {
        std::uint32_t& w = s[mt][n / 2][2 * (n % 2) + i];
        if (8 * n >= hi) w = (w & 0xFFFF0000u) | 0x0000FC00u;      // -inf in the low half
        if (8 * n + 1 >= hi) w = (w & 0x0000FFFFu) | 0xFC000000u;  // ... and the high half
      }
    }
  }
}

}  // namespace pasa::cuda
