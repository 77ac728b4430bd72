// SPDX-License-Identifier: Apache-2.0
// The per-row online-softmax step of the forward kernels, on one warp's (16 kMTiles) x kBlockN score
// tile in the mma C layout: each thread holds 2 kMTiles rows (row index r = 2 mt + i for rows g and
// g + 8 of m-tile mt) and kBlockN / 4 scores of each; the four threads of a quad (lanes 4g .. 4g + 3)
// share a row and reduce over it with two shuffles.
//
// ExactSoftmax: FlashAttention-2 in fp32 (algorithms.md section 1) on raw scores: the row max is taken before
//   scaling (the scale is > 0: the host passes |alpha| and flips Q for alpha < 0), and the scaling
//   rides in the exponent's FFMA, P = 2^(s |alpha| log2 e - m). The running sum stays a per-thread
//   partial until the end. step() reports whether any row's max moved, so that the kernel can skip
//   rescaling O (a factor of exactly 1) for a warp whose maxima all stayed.
// PasaSoftmax: the paper's Algorithm 1 (algorithms.md section 3) as the CPU emulator's run_query_block orders
//   it, every intermediate an fp16 value where the emulator rounds. Scores and P are held as packed
//   fp16 pairs (the A-fragment layout of the P V MMA), so that the rounding points cost no
//   conversions: S' - m is one HSUB2 per pair, P leaves the exponential through one F2FP per pair.
//   The row sums (of S' for the pseudo-average, of P for l) come from the tensor cores in fp32 and
//   are rounded once, as the emulator's sum_acc=fp32 does. The state is relative to the row's running
//   maximum of its recovered scores (reference=max): a block's m' + G s' in fp32, the pseudo-average
//   s' in fp32. The per-row scalar state (m, l) lives in one lane of the quad per row, not in all four.
//   kFp16State = false is the pasa_accurate policy: S' stays in the fp32 accumulators (its max and the
//   exponents' arguments in fp32: block_max_fp32, exponentiate_fp32), and l and the rescale factors
//   are fp32; P is still fp16. kBase2: the scores are in
//   base-2 units (exp_base=2, alpha log2 e folded into M by the host), so each exponential is 2^x
//   of its argument as it stands, with no multiply by log2 e; else natural units, e^x.
// UnifiedSoftmax: FlashDecoding++'s unified max (algorithms.md section 5) for the decode kernel: every score
//   against one fixed phi, no running max, no rescaling.
#pragma once

#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "cuda/arch/ptx.cuh"
#include "cuda/host/kernel_params.h"  // kPasaBlockKv
#include "numerics/pasa_headroom.h"

namespace pasa::cuda {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// x[0] op x[1] op ... op x[N - 1] as a balanced tree, in place (x is overwritten): as many instructions
// as a chain, but log2 N of them deep instead of N - 1, so that their latencies overlap. (For max the
// result is the chain's; for a sum the rounding order differs.)
template <typename T, int N, typename Op>
__device__ __forceinline__ T tree_reduce(T (&x)[N], Op op) {
#pragma unroll
  for (int w = 1; w < N; w *= 2)
#pragma unroll
    for (int j = 0; j + w < N; j += 2 * w) x[j] = op(x[j], x[j + w]);
  return x[0];
}

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct AddOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// The max of row i of m-tile mt over its quad (the mma C layout: each thread's kNTiles pairs).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ float row_max(const float (&s)[kMTiles][kNTiles][4], int mt, int i) {
  float mx[kNTiles];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) mx[n] = fmaxf(s[mt][n][2 * i], s[mt][n][2 * i + 1]);
  return quad_max(tree_reduce(mx, MaxOp{}));
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------
// exact

template <int kMTiles>
struct ExactSoftmax {
  static constexpr int kRows = 2 * kMTiles;
  float m[kRows];  // running max of |alpha| log2(e) S (base-2 units), -inf before any visible key
  float l[kRows];  // this thread's partial running sum of exponentials

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
    }
  }

  // s: raw masked scores in (-inf where masked); P = 2^(s scale - m_new) out (fp32). rescale[r]: the
  // factor for row r's running O (exactly 1 where the max stayed). Returns whether any of this
  // thread's rows moved its max.
  template <int kNTiles>
  __device__ __forceinline__ bool step(float (&s)[kMTiles][kNTiles][4], float scale_log2,
                                       float (&rescale)[kRows]) {
    bool moved = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = 2 * mt + i;
        const float m_new = fmaxf(m[r], row_max(s, mt, i) * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no visible key yet: P = 0, not NaN
        const bool same = m_new == m[r];
        moved |= !same;
        rescale[r] = same ? 1.0f : fast_exp2(m[r] - m_use);
        const float neg_m = -m_use;
        float sums[kNTiles];
#pragma unroll
        for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) s[mt][n][2 * i + e] = fast_exp2(fmaf(s[mt][n][2 * i + e], scale_log2, neg_m));
          sums[n] = s[mt][n][2 * i] + s[mt][n][2 * i + 1];
        }
        l[r] = l[r] * rescale[r] + tree_reduce(sums, AddOp{});
        m[r] = m_new;
      }
    }
    return moved;
  }

  // Final row sums (quad-reduced), and the LSE in natural log; -inf for a row that saw no key.
  __device__ __forceinline__ void finish(float (&row_l)[kRows], float (&lse)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_l[r] = quad_sum(l[r]);
      lse[r] = (m[r] == -INFINITY || row_l[r] == 0.0f) ? -INFINITY : (m[r] + log2f(row_l[r])) * kLn2;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// pasa

template <int kMTiles, bool kFp16State, bool kBase2>
struct PasaSoftmax {
  static constexpr int kRows = 2 * kMTiles;
  // The exponential's argument in base-2 units, for the special-function unit's 2^x.
  __device__ __forceinline__ static float to_log2(float x) { return kBase2 ? x : x * kLog2e; }
  // e^x or 2^x (kBase2) of a state term, to fp32 accuracy, before its rounding to the state format.
  __device__ __forceinline__ static float power(float x) { return kBase2 ? exp2f(x) : expf(x); }
  // l, a rescale factor or its argument at its rounding point: fp16 for pasa, fp32 for pasa_accurate.
  __device__ __forceinline__ static float stat(float x) { return kFp16State ? round_fp16(x) : x; }
  // The headroom's largest move (pasa_headroom.h): its factor keeps 8 bits in l's format.
  static constexpr float kMaxMove = kFp16State ? pasa_max_move(10, -14, kBase2) : pasa_max_move(23, -126, kBase2);
  static_assert(kRows <= 4, "one row of the thread's fragments per lane of its quad");
  // The scalar state of one row: lane t of each quad keeps row t of the quad's kRows rows (rows g,
  // g + 8 of m-tile 0, then of m-tile 1), so each row's update runs once, not in all four lanes;
  // the rescale factors then go to the whole quad by shuffles. Lanes t >= kRows keep nothing.
  float m;  // the reference: the running maximum of the row's recovered scores (fp32)
  float l;  // running sum of exponentials (an fp16 value, complete row)
  float w;  // the bound on |O~| of the headroom's O~ rule (pasa_output_bound)
  float e_prev, e_cur;  // the owned row's rescale factors of the last block (rescale -> add_block)
  float v_cur;          // the last block's largest |V| (rescale -> add_block)

  __device__ __forceinline__ void init() {
    m = -INFINITY;
    l = 0.0f;
    w = 0.0f;
  }

  // This lane's own row among kRows per-row values (identical in all four lanes of the quad).
  __device__ __forceinline__ static float own(const float (&x)[kRows]) {
    const int t = static_cast<int>(threadIdx.x) % 4;
    float v = x[0];
#pragma unroll
    for (int r = 1; r < kRows; ++r) v = t == r ? x[r] : v;
    return v;
  }

  // Row r's value from the lane that owns it.
  __device__ __forceinline__ static void broadcast(float mine, float (&x)[kRows]) {
    const int quad = static_cast<int>(threadIdx.x) % 32 & ~3;
#pragma unroll
    for (int r = 0; r < kRows; ++r) x[r] = __shfl_sync(0xffffffffu, mine, quad | r);
  }

  // s: masked S' as fp16 pairs in the A-fragment layout (tile n's pair of row i of m-tile mt in
  // s[mt][n / 2][2 (n % 2) + i]). m_blk[r]: row r's block max (-inf for a row that sees no key of the
  // block); m_use[r]: the fp16 shift its exponentials are taken against (0 for such a row, whose P is
  // then 0, not NaN).
  template <int kNChunks>
  __device__ __forceinline__ static void block_max(const std::uint32_t (&s)[kMTiles][kNChunks][4],
                                                   float (&m_blk)[kRows], __half2 (&m_use)[kRows]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        __half2 mx2 = __half2half2(__ushort_as_half(0xFC00u));  // -inf
#pragma unroll
        for (int kk = 0; kk < kNChunks; ++kk) {
          mx2 = __hmax2(mx2, as_half2(s[mt][kk][i]));
          mx2 = __hmax2(mx2, as_half2(s[mt][kk][2 + i]));
        }
        const float mx = quad_max(fmaxf(__low2float(mx2), __high2float(mx2)));
        m_blk[2 * mt + i] = mx;
        m_use[2 * mt + i] = __float2half2_rn(mx == -INFINITY ? 0.0f : mx);  // an fp16 value: exact
      }
    }
  }

  // block_max for S' in fp32 accumulators (the mma C layout: s[mt][n][2 i + e] is column 8 n + 2 t + e
  // of row i of m-tile mt), masked scores already -inf; m_blk[r] = -inf for a row that sees no key.
  template <int kNTiles>
  __device__ __forceinline__ static void block_max_fp32(const float (&s)[kMTiles][kNTiles][4], float (&m_blk)[kRows]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int i = 0; i < 2; ++i) m_blk[2 * mt + i] = row_max(s, mt, i);
  }

  // P = fl16(e^(S' - m)) from fp32 S' for k16 chunk kc of m-tile mt, as the P V A fragment w (the
  // chunk's n8 tiles 2 kc and 2 kc + 1). m_blk = -inf (a row that sees no key): its P is 0.
  template <int kNTiles>
  __device__ __forceinline__ static void exponentiate_fp32(std::uint32_t (&w)[4], const float (&s)[kMTiles][kNTiles][4],
                                                           const float (&m_blk)[kRows], int mt, int kc) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e % 2;
      const float m = m_blk[2 * mt + i] == -INFINITY ? 0.0f : m_blk[2 * mt + i];
      const float* x = &s[mt][2 * kc + e / 2][2 * i];
      w[e] = pack2<__half>(fast_exp2(to_log2(x[0] - m)), fast_exp2(to_log2(x[1] - m)));
    }
  }

  // P = fl(e^(fl(S' - m))) (kBase2: 2^) in place for one k16 chunk w (= s[mt][kk]) of m-tile mt.
  __device__ __forceinline__ static void exponentiate_chunk(std::uint32_t (&w)[4], const __half2 (&m_use)[kRows],
                                                            int mt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 x = __half22float2(__hsub2(as_half2(w[e]), m_use[2 * mt + e % 2]));  // exact widening
      w[e] = pack2<__half>(fast_exp2(to_log2(x.x)), fast_exp2(to_log2(x.y)));
    }
  }

  // The owned row's candidate for the new reference from a key block: its maximum recovered,
  // m' + G s', with one rounding, saturated; -inf for a row that sees no key of the block. mean[r] =
  // the row's local pseudo-average s' (fp32), m_blk[r] its block max m' (identical across the quad).
  // (Taken apart from rescale() so that an update after the block's P V keeps one value live across
  // it, not the four it comes from.)
  __device__ __forceinline__ static float candidate(const float (&m_blk)[kRows], const float (&mean)[kRows], float g) {
    const float mb = own(m_blk), mn = own(mean);
    return mb == -INFINITY ? -INFINITY : fminf(fmaxf(fmaf(g, mn, mb), -FLT_MAX), FLT_MAX);
  }

  // The state update of a key block but for l and w: cur = the owned row's candidate(), v_blk the
  // block's largest |V| (the same in every thread: the prepass's slots, pasa_stage.cuh), weight the
  // owned row's bound on the sum of the block's weights against its own maximum (row_weight() of its
  // row sums of P, where they are known before the update; else kPasaBlockKv: pasa_headroom.h).
  // ep / ec: the rescale factors of the running O~ and of this block's P V for each of the thread's
  // rows (ep = 1, ec = 0 for a row that sees no key of the block: the emulator leaves such a row's
  // state untouched). Called by all lanes (it shuffles); add_block() completes it.
  // Branch-free: every lane computes and selects, so that the update is one basic block that the
  // compiler can interleave with the work around it instead of running it alone.
  __device__ __forceinline__ void rescale(float cur, float v_blk, float weight, float (&ep)[kRows], float (&ec)[kRows]) {
    const bool updates = static_cast<int>(threadIdx.x) % 4 < kRows && cur != -INFINITY;
    // The new reference is the larger of the candidate and m, exactly, so the larger factor is 1. The
    // row's first block (m = -inf) takes the candidate as it is, with factors 0 and 1. Then the
    // headroom for l and O~, rounded up unless that moves too far.
    const bool first = m == -INFINITY;
    float m_new = fmaxf(m, cur);
    const float h = pasa_headroom(l, w, v_blk, cur - m_new, weight, kBase2);
    const float up = __fadd_ru(m_new, h), nearest = m_new + h;
    const float moved = up - m_new <= kMaxMove ? up : nearest;
    m_new = h == 0.0f ? m_new : moved;
    // (The argument is selected, not the exponential, so that each is one unconditional MUFU: e^-inf =
    // 0 is the first block's factor of the empty state.)
    const float e_prev_next = stat(power(first ? -INFINITY : stat(m - m_new)));
    const float e_cur_next = stat(power(stat(cur - m_new)));
    e_prev = updates ? e_prev_next : 1.0f;
    e_cur = updates ? e_cur_next : 0.0f;
    m = updates ? m_new : m;
    v_cur = v_blk;
    broadcast(e_prev, ep);
    broadcast(e_cur, ec);
  }

  // The owned row's sum of the block's P as l takes it, fl(psum) (psum[r] = the fp32 row sum of the
  // block's P against its own maximum, identical across the quad): rescale()'s weight.
  __device__ __forceinline__ static float row_weight(const float (&psum)[kRows]) { return stat(own(psum)); }

  // l = fl(fl(ep l) + fl(ec fl(psum))) with the factors of the last rescale(), and the bound w. (A row
  // that saw no key: ep = 1 and ec = 0 leave both unchanged.)
  __device__ __forceinline__ void add_block(const float (&psum)[kRows]) { add_to_state(stat(e_cur * row_weight(psum))); }

  // The same for a block whose P was taken against the running maximum (its factor e_cur already in
  // P: pasa_fp16acc): l = fl(fl(ep l) + fl(psum)).
  __device__ __forceinline__ void add_running_block(const float (&psum)[kRows]) { add_to_state(stat(own(psum))); }

  __device__ __forceinline__ void add_to_state(float l_add) {
    const bool owner = static_cast<int>(threadIdx.x) % 4 < kRows;
    const float l_next = stat(stat(e_prev * l) + l_add);
    const float w_next = pasa_output_bound(w, e_prev, l_add, v_cur);
    l = owner ? l_next : l;
    w = owner ? w_next : w;
  }

  // Final row sums and LSE = m + log(l) (with kBase2, m ln 2 + log(l): the LSE is in natural units),
  // -inf for an empty row, for each of the thread's rows. Called by all lanes (it shuffles).
  __device__ __forceinline__ void finish(float (&row_l)[kRows], float (&lse)[kRows]) const {
    const float shift = kBase2 ? m * kLn2 : m;
    const float my_lse = (m == -INFINITY || l == 0.0f) ? -INFINITY : shift + logf(l);
    broadcast(l, row_l);
    broadcast(my_lse, lse);
  }
};

// A key block's P V as pasa's O~ update takes it (pasa_headroom.h): each fp32 sum rounded to fp16, at
// 2^-shift times its value for a block of large V (kShifted: pasa_pv_shift > 0, the same in every
// thread), whose factor then takes the 2^shift back. kShifted = false is the plain update, with no
// product by 1.
template <bool kShifted>
struct PvShift {
  float down, up;
  __device__ __forceinline__ explicit PvShift(int shift)
      : down(kShifted ? pasa_power_of_two(-shift) : 1.0f), up(kShifted ? pasa_power_of_two(shift) : 1.0f) {}
  // fl16 of the pair sum[0], sum[1] (at 2^-shift).
  __device__ __forceinline__ __half2 pair(const float* sum) const {
    return kShifted ? __floats2half2_rn(sum[0] * down, sum[1] * down) : __floats2half2_rn(sum[0], sum[1]);
  }
  // The block's factor ec (times 2^shift).
  __device__ __forceinline__ float factor(float ec) const { return kShifted ? ec * up : ec; }
};

// ---------------------------------------------------------------------------------------------
// unified max (FlashDecoding++, algorithms.md section 5)

// Every score is measured against the one fixed phi: P = 2^(s |alpha| log2 e - phi log2 e), no
// running max and no rescaling, so that the splits of the key axis are simply summed. The window test
// (a row with any visible x - phi outside (lo, hi), x = alpha s, goes to the synchronized path)
// happens in the kernel, where the visibility of each key is known.
template <int kMTiles>
struct UnifiedSoftmax {
  static constexpr int kRows = 2 * kMTiles;
  float l[kRows];  // this thread's partial sum of exponentials

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) l[r] = 0.0f;
  }

  // s: raw masked scores in (-inf where masked: P = 0), P out (fp32).
  template <int kNTiles>
  __device__ __forceinline__ void step(float (&s)[kMTiles][kNTiles][4], float scale_log2, float phi_log2) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = fast_exp2(fmaf(s[mt][n][2 * i + e], scale_log2, -phi_log2));
            s[mt][n][2 * i + e] = p;
            sum += p;
          }
        }
        l[2 * mt + i] += sum;
      }
    }
  }
};

}  // namespace pasa::cuda
