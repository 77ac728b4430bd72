// SPDX-License-Identifier: Apache-2.0
// The causal and sequence-end masks of the forward kernels, on a warp's scores in the mma.sync C
// layout (exact: fp32) or as fp16 pairs in the A-fragment layout (pasa), which the wgmma accumulator
// layout of one warp's 16 rows repeats: thread (g = lane / 4, t = lane % 4) holds rows
// row_lo + 16 mt + 8 i and keys n0 + 8 n + 2 t + e.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

// Keys a row may not see: past the sequence end, and (causal) after the row's last visible key.
__device__ __forceinline__ int visible_limit(const FwdParams& p, int row) {
  return p.causal ? min(p.seq_kv, row + p.causal_offset + 1) : p.seq_kv;
}

// The key blocks (of `block` keys, n_kb of them) that rows [r0, r0 + rows) of a CTA visit: all but the
// blocks past the last row's causal diagonal.
__device__ __forceinline__ int visited_key_blocks(const FwdParams& p, int r0, int rows, int block, int n_kb) {
  if (!p.causal) return n_kb;
  const int last = min(r0 + rows - 1, p.seq_q - 1) + p.causal_offset;
  return last < 0 ? 0 : min(n_kb, last / block + 1);
}

// Whether some key of the block [key0, key0 + block) is invisible to some of the rows from row_lo on:
// past the sequence end, or past the first row's causal diagonal.
__device__ __forceinline__ bool block_needs_mask(const FwdParams& p, int key0, int block, int row_lo) {
  return key0 + block > p.seq_kv || (p.causal && key0 + block - 1 > row_lo + p.causal_offset);
}

// fp32 scores of keys at or past their row's limit become -inf: limit_of(2 mt + i) for rows i (g, g + 8)
// of m-tile mt (called once per row, where the row's loop begins), keys from n0.
template <int kMTiles, int kNTiles, typename LimitOf>
__device__ __forceinline__ void mask_past_limits(float (&s)[kMTiles][kNTiles][4], int n0, LimitOf limit_of) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int limit = limit_of(2 * mt + i);
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (n0 + 8 * n + 2 * t + e >= limit) s[mt][n][2 * i + e] = -INFINITY;
        }
      }
    }
  }
}

// exact: scores of keys a row may not see become -inf.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void apply_mask(float (&s)[kMTiles][kNTiles][4], const FwdParams& p, int n0,
                                           int row_lo) {
  mask_past_limits(s, n0, [&](int r) { return visible_limit(p, row_lo + 16 * (r / 2) + 8 * (r % 2)); });
}

// pasa: the same on fp16 pairs in the A-fragment layout (tile n, row i: s[mt][n / 2][2 (n % 2) + i]).
template <int kMTiles, int kNChunks>
__device__ __forceinline__ void apply_mask(std::uint32_t (&s)[kMTiles][kNChunks][4], const FwdParams& p,
                                           int n0, int row_lo) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int limit = visible_limit(p, row_lo + 16 * mt + 8 * i);
#pragma unroll
      for (int n = 0; n < 2 * kNChunks; ++n) {
        std::uint32_t& w = s[mt][n / 2][2 * (n % 2) + i];
        const int key = n0 + 8 * n + 2 * t;
        if (key >= limit) w = (w & 0xFFFF0000u) | 0x0000FC00u;      // -inf in the low half
        if (key + 1 >= limit) w = (w & 0x0000FFFFu) | 0xFC000000u;  // ... and the high half
      }
    }
  }
}

}  // namespace pasa::cuda
