// The per-row online-softmax step of the forward kernels, on one warp's 16 x kBlockN score tile in
// the mma C layout: each thread holds two rows (g and g + 8, index i = 0 / 1) and kBlockN / 4 of
// their scores; the four threads of a quad (lanes 4g .. 4g + 3) share a row and reduce over it with
// two shuffles.
//
// ExactSoftmax: FlashAttention-2 in fp32 (spec section 1), base-2 exponentials on scores already
//   multiplied by alpha * log2(e); the running sum stays a per-thread partial until the end.
// PasaSoftmax: the paper's Algorithm 1 (spec section 3) exactly as the CPU emulator's
//   run_query_block orders it, every intermediate rounded to fp16 (the pasa preset's softmax format)
//   where the emulator rounds; sums over a row are taken in fp32 and rounded once (the emulator sums
//   in fp16 one term at a time: ours is the more accurate of the two).
#pragma once

#include <cmath>

#include "cuda/ptx.cuh"

namespace pasa::cuda {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------
// exact

struct ExactSoftmax {
  float m[2];  // running max of alpha * log2(e) * S (base-2 units), -inf before any visible key
  float l[2];  // this thread's partial running sum of exponentials

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // s: scaled and masked scores in; P = exp2(s - m_new) out (fp32). rescale[i]: factor for the
  // running O of row i.
  template <int kNTiles>
  __device__ __forceinline__ void step(float (&s)[kNTiles][4], float (&rescale)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
      const float m_new = fmaxf(m[i], quad_max(mx));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no visible key yet: P = 0, not NaN
      rescale[i] = exp2f(m[i] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = fast_exp2(s[n][2 * i + e] - m_use);
          s[n][2 * i + e] = p;
          sum += p;
        }
      }
      l[i] = l[i] * rescale[i] + sum;
      m[i] = m_new;
    }
  }

  // Final row sums (quad-reduced), and the LSE in natural log; -inf for a row that saw no key.
  __device__ __forceinline__ void finish(float (&row_l)[2], float (&lse)[2]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_l[i] = quad_sum(l[i]);
      lse[i] = (m[i] == -INFINITY || row_l[i] == 0.0f) ? -INFINITY : (m[i] + log2f(row_l[i])) * kLn2;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// pasa

struct PasaSoftmax {
  float m[2];   // running max relative to the reference g * F (fp16 values)
  float l[2];   // running sum of exponentials (fp16 values, complete: quad-reduced every block)
  float F[2];   // global pseudo-average (Eq. 15)
  int blocks[2];  // key blocks seen by the row (the j of Eq. 15)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.0f;
      F[i] = 0.0f;
      blocks[i] = 0;
    }
  }

  // Local pseudo-average s' of each row: the mean of S' over all n_valid keys of the block, masked
  // by causality or not (K' = M K subtracted the mean of all of them). Keys past the sequence end
  // hold S' = 0 exactly (zero-filled K'), so the sum over the whole tile is the sum over the block.
  template <int kNTiles>
  __device__ __forceinline__ static void block_mean(const float (&s)[kNTiles][4], int n_valid,
                                                    float (&mean)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) sum += s[n][2 * i] + s[n][2 * i + 1];
      mean[i] = round_fp16(quad_sum(sum) / static_cast<float>(n_valid));
    }
  }

  // s: fp16-valued, masked scores in; P (fp16 values) out. ep / ec: the rescale factors of the
  // running O~ and of this block's P V (ep = 1, ec = 0 for a row that sees no key of the block:
  // the emulator leaves such a row's state untouched).
  template <int kNTiles>
  __device__ __forceinline__ void step(float (&s)[kNTiles][4], const float (&mean)[2], float g,
                                       float (&ep)[2], float (&ec)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
      const float m_blk = quad_max(mx);
      const bool active = m_blk != -INFINITY;
      const float m_use = active ? m_blk : 0.0f;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = round_fp16(fast_exp2(round_fp16(s[n][2 * i + e] - m_use) * kLog2e));
          s[n][2 * i + e] = p;
          sum += p;
        }
      }
      const float l_blk = round_fp16(quad_sum(sum));  // before the branch: the whole warp shuffles
      ep[i] = 1.0f;
      ec[i] = 0.0f;
      if (!active) continue;
      const int j = blocks[i] + 1;
      const float F_new =
          round_fp16(round_fp16(round_fp16(static_cast<float>(j - 1) * F[i]) + mean[i]) /
                     static_cast<float>(j));
      const float d_prev = round_fp16(g * round_fp16(F[i] - F_new));
      const float d_cur = round_fp16(g * round_fp16(mean[i] - F_new));
      float m_new, e_prev = 0.0f;
      if (m[i] == -INFINITY) {
        m_new = round_fp16(m_blk + d_cur);
      } else {
        m_new = fmaxf(round_fp16(m[i] + d_prev), round_fp16(m_blk + d_cur));
        e_prev = round_fp16(expf(round_fp16(round_fp16(m[i] - m_new) + d_prev)));
      }
      const float e_cur = round_fp16(expf(round_fp16(round_fp16(m_blk - m_new) + d_cur)));
      l[i] = round_fp16(round_fp16(e_prev * l[i]) + round_fp16(e_cur * l_blk));
      m[i] = m_new;
      F[i] = F_new;
      blocks[i] = j;
      ep[i] = e_prev;
      ec[i] = e_cur;
    }
  }

  // LSE = m + log(l) + g * F (the state is relative to the reference g * F); -inf for an empty row.
  __device__ __forceinline__ void finish(float g, float (&row_l)[2], float (&lse)[2]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_l[i] = l[i];
      lse[i] = (m[i] == -INFINITY || l[i] == 0.0f) ? -INFINITY : m[i] + logf(l[i]) + g * F[i];
    }
  }
};

}  // namespace pasa::cuda
