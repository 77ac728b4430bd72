// SPDX-License-Identifier: Apache-2.0
// The end of the split-KV decode path (decode_params.h): writing a packed row's final O and LSE, and
// the exact merge of the splits' partials (algorithms.md section 1), in two forms. Eager calls merge
// inside the split kernel: its last CTA of each (batch, K/V head, row chunk) to finish, found by an
// arrival counter, merges that group's rows, so a call is one launch (the host's floor for a launch
// is a few microseconds, the whole budget of a decode step's host time). Calls captured in a CUDA
// graph, where host time is spent once, run the merge kernel after the split kernel instead: a CTA
// per packed row merges in fewer dependent reads than one CTA per group can (measured in
// bench/NOTES.md: up to 9% of a B 1 step's GPU time).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/arch/ptx.cuh"
#include "cuda/block/epilogue.cuh"
#include "cuda/block/online_softmax.cuh"  // kLn2
#include "cuda/host/decode_params.h"

namespace pasa::cuda {

// Packed row r of K/V head h_kv: query head h_kv group + r / S_q, query index r % S_q.
__device__ __forceinline__ int packed_head(const DecodeParams& p, int h_kv, int r) {
  return h_kv * p.fwd.group + r / p.fwd.seq_q;
}

// Four consecutive output values of one row (the pointer is 16-byte aligned, col a multiple of 4).
__device__ __forceinline__ void store_quad(char* row, ElemType type, int col, float4 v) {
  switch (type) {
    case ElemType::f32:
      *reinterpret_cast<float4*>(reinterpret_cast<float*>(row) + col) = v;
      break;
    case ElemType::f16:
      *reinterpret_cast<uint2*>(reinterpret_cast<__half*>(row) + col) =
          make_uint2(pack2<__half>(v.x, v.y), pack2<__half>(v.z, v.w));
      break;
    case ElemType::bf16:
      *reinterpret_cast<uint2*>(reinterpret_cast<__nv_bfloat16*>(row) + col) =
          make_uint2(pack2<__nv_bfloat16>(v.x, v.y), pack2<__nv_bfloat16>(v.z, v.w));
      break;
  }
}

// The final O row piece and the LSE of packed row r from its (M, L, O~) (base-2 M; -inf or L = 0:
// no visible key, O = 0 and LSE = -inf).
__device__ __forceinline__ void store_final(const DecodeParams& p, int b, int h_kv, int r, int col, float M,
                                            float L, float4 o) {
  const FwdParams& f = p.fwd;
  const bool empty = M == -INFINITY || L == 0.0f;
  const float inv = empty ? 0.0f : 1.0f / L;
  const int h = packed_head(p, h_kv, r), s = r % f.seq_q;
  store_quad(output_row(f, b, h, s), f.o_type, col, make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv));
  if (col == 0 && f.lse != nullptr) {
    f.lse[b * f.lse_stride_b + h * f.lse_stride_h + static_cast<std::int64_t>(s) * f.lse_stride_s] =
        empty ? -INFINITY : (M + log2f(L)) * kLn2;
  }
}

// The arrival of a split CTA at its group's counter; true for the group's last arrival, which merges.
// A counter is one 64-bit word of the workspace: kArrivalTag above a 16-bit count (splits <= 1024).
// Every run leaves its counters at (tag, 0), so the next run (a graph replay, the next decode step,
// another problem on the same workspace) arrives with one atomic add a CTA. A word without the tag
// (bytes never written, or another array of an earlier problem) counts as zero, so the workspace needs
// no initialization: the CTA whose add landed last on such a word swaps it for (tag, 1), and the
// others, whose adds the swap absorbed, arrive again. Arbitrary bytes pass for the tag with odds of
// 2^-48 a word; the tag's high half is a float NaN that GPU arithmetic never makes (its NaNs are
// 0x7fffffff), and neither zeroed nor 0xff-filled memory holds the tag.
constexpr unsigned long long kArrivalTag = 0x7ff8dec0de000000ull;

__device__ __forceinline__ bool arrive_last(unsigned long long* word, int splits) {
  constexpr unsigned long long kCount = 0xffffull, tag = kArrivalTag;
  unsigned long long old = atomic_add_acq_rel(word, 1ull);
  while ((old & ~kCount) != tag) {
    if (atomic_cas_acq_rel(word, old + 1, tag + 1) == old + 1) {
      old = tag;  // (count 1 below)
      break;
    }
    const unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(word);
    if ((seen & ~kCount) == tag) {
      old = atomic_add_acq_rel(word, 1ull);
    } else {
      old = seen - 1;  // (try to swap `seen` itself)
    }
  }
  if (static_cast<int>((old & kCount) + 1) != splits) return false;
  atomicExch(word, tag);
  return true;
}

// The merge kernel's threads (attention_decode_merge_kernel below), and a float4's fused multiply-add
// and sum, written out so that both merges round alike.
constexpr int kMergeThreads = 128;
__device__ __forceinline__ float4 fma4(float w, float4 x, float4 acc) {
  return make_float4(__fmaf_rn(w, x.x, acc.x), __fmaf_rn(w, x.y, acc.y), __fmaf_rn(w, x.z, acc.z),
                     __fmaf_rn(w, x.w, acc.w));
}
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

// Exact merge of the splits (algorithms.md section 1) of packed rows [row_begin, row_end) of K/V head
// (b, h_kv), by the group's last split CTA: warp w merges rows row_begin + w, + kWarps, ... Each warp
// repeats, operation for operation, what the merge kernel's CTA of kMergeThreads does for a row, so
// that an eager call and a captured one give the same bits: the maximum (exact in any order), L as
// the kernel's threads t = lane + 32 v sum it and its warps v reduce it, and O as its warp v sums
// splits v, v + 4, ... (accumulator v here), then the four in order. kUnroll splits' loads are in
// flight at a time. The partials are read past L1 (__ldcg): other CTAs wrote them.
template <int kHeadDim, int kWarps>
__device__ void merge_rows(const DecodeParams& p, int b, int h_kv, int row_begin, int row_end, std::int64_t R,
                           std::int64_t head_row0, int warp, int lane) {
  constexpr int kMW = kMergeThreads / 32;  // the merge kernel's warps
  constexpr int kQuads = kHeadDim / 4;
  constexpr int kPerLane = (kQuads + 31) / 32;
  constexpr int kUnroll = 16 / kPerLane;  // (64 registers of loads in flight, within the kernel's budget)
  constexpr unsigned kAll = 0xffffffffu;
  static_assert(kUnroll % kMW == 0, "a batch of splits keeps each split's accumulator");
  for (int row = row_begin + warp; row < row_end; row += kWarps) {
    const std::int64_t idx = head_row0 + row;
    const auto ml_of = [&](int s) { return __ldcg(reinterpret_cast<const float2*>(p.part_ml) + s * R + idx); };
    // The (m, l) and flags of splits lane + 32 v, the first kMergeThreads splits, read in one batch:
    // the merge kernel's thread lane + 32 v starts its sum of l with them.
    float2 first[kMW];
    int flag = 0;
#pragma unroll
    for (int v = 0; v < kMW; ++v) {
      const int s = lane + 32 * v;
      first[v] = s < p.splits ? ml_of(s) : make_float2(-INFINITY, 0.0f);
      flag |= s < p.splits ? __ldcg(p.part_flag + s * R + idx) : 0;
    }
    float m = -INFINITY;
#pragma unroll
    for (int v = 0; v < kMW; ++v) m = fmaxf(m, first[v].x);
    for (int s = lane + kMergeThreads; s < p.splits; s += 32) {  // (more than kMergeThreads splits)
      m = fmaxf(m, ml_of(s).x);
      flag |= __ldcg(p.part_flag + s * R + idx);
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(kAll, m, d));
    if (__any_sync(kAll, flag != 0) && lane == 0 && p.counter != nullptr) atomicAdd(p.counter, 1);
    const float m_ref = m == -INFINITY ? 0.0f : m;  // (as the kernel's weight)
    const auto weight = [&](float ms) { return exp2f(ms - m_ref); };
    float L = 0.0f;
#pragma unroll
    for (int v = 0; v < kMW; ++v) {
      float l = lane + 32 * v < p.splits ? __fmaf_rn(weight(first[v].x), first[v].y, 0.0f) : 0.0f;
      for (int s = lane + 32 * v + kMergeThreads; s < p.splits; s += kMergeThreads) {
        const float2 ml = ml_of(s);
        l = __fmaf_rn(weight(ml.x), ml.y, l);
      }
#pragma unroll
      for (int d = 16; d > 0; d /= 2) l = l + __shfl_xor_sync(kAll, l, d);
      L = v == 0 ? l : L + l;
    }
    float4 acc[kMW][kPerLane] = {};
    for (int s0 = 0; s0 < p.splits; s0 += kUnroll) {
      float ms[kUnroll];
      float4 x[kUnroll][kPerLane];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int sc = min(s0 + u, p.splits - 1);
        ms[u] = ml_of(sc).x;
        const float4* src = reinterpret_cast<const float4*>(p.part_o + (sc * R + idx) * kHeadDim);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) x[u][i] = __ldcg(src + min(lane + 32 * i, kQuads - 1));
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (s0 + u >= p.splits) break;
        const float w = weight(ms[u]);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc[u % kMW][i] = fma4(w, x[u][i], acc[u % kMW][i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      float4 o = acc[0][i];
#pragma unroll
      for (int v = 1; v < kMW; ++v) o = add4(o, acc[v][i]);
      if (lane + 32 * i < kQuads) store_final(p, b, h_kv, row, 4 * (lane + 32 * i), m, L, o);
    }
  }
}

// Exact merge of the splits (algorithms.md section 1), one CTA of kMergeThreads per packed row. A
// small batch has few rows and many splits, so the merge's time is its chain of dependent reads: every
// thread reads one split's m and l (the CTA's max M, flag and L from them, through shared memory),
// then warp w sums the weighted O~ of splits w, w + 4, ..., kUnroll of them in flight per lane (lanes
// on the row's float4 pieces; indices past the ends clamped and skipped), and the four warps' sums
// meet in shared memory. Partials of the unified max (m = phi) and of the synchronized fallback (their
// own m) are weighed alike; with a counter, the rows some split flagged are counted. merge_rows
// repeats this arithmetic operation for operation.

template <int kHeadDim>
__global__ void __launch_bounds__(kMergeThreads) attention_decode_merge_kernel(const __grid_constant__ DecodeParams p,
                                                                              int batch) {
  constexpr int kWarps = kMergeThreads / 32;
  constexpr int kQuads = kHeadDim / 4;
  constexpr int kPerLane = (kQuads + 31) / 32;
  constexpr int kUnroll = 8;
  constexpr unsigned kAll = 0xffffffffu;
  __shared__ float s_stat[kWarps];
  __shared__ float4 s_o[kWarps][kQuads];
  wait_for_previous_grid();  // the split kernel's partials
  const std::int64_t R = static_cast<std::int64_t>(batch) * p.heads_kv * p.rows;
  const std::int64_t idx = blockIdx.x;  // the packed row
  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
  const auto ml_of = [&](int s) { return *reinterpret_cast<const float2*>(p.part_ml + (s * R + idx) * 2); };
  const auto block_reduce = [&](float x, bool max) {  // (ends synced; s_stat free again after it)
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
      const float y = __shfl_xor_sync(kAll, x, d);
      x = max ? fmaxf(x, y) : x + y;
    }
    if (lane == 0) s_stat[warp] = x;
    __syncthreads();
    x = s_stat[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) x = max ? fmaxf(x, s_stat[w]) : x + s_stat[w];
    __syncthreads();
    return x;
  };

  float m = -INFINITY;
  int flag = 0;
  for (int s = t; s < p.splits; s += kMergeThreads) {
    m = fmaxf(m, ml_of(s).x);
    flag |= p.part_flag[s * R + idx];
  }
  if (__syncthreads_or(flag) && t == 0 && p.counter != nullptr) atomicAdd(p.counter, 1);
  const float M = block_reduce(m, true);
  // w = 2^(m_s - M), 0 for a split that saw no key (m_s = -inf), with no branch on the loaded m_s: a
  // branch would wait for each load in turn. (M = -inf: every split empty, every weight 0.)
  const float m_ref = M == -INFINITY ? 0.0f : M;
  const auto weight = [&](float ms) { return exp2f(ms - m_ref); };
  float l = 0.0f;
  for (int s = t; s < p.splits; s += kMergeThreads) {
    const float2 ml = ml_of(s);
    l = __fmaf_rn(weight(ml.x), ml.y, l);
  }
  const float L = block_reduce(l, false);

  float4 acc[kPerLane] = {};
  for (int s0 = warp; s0 < p.splits; s0 += kWarps * kUnroll) {
    float wt[kUnroll];
    float4 x[kUnroll][kPerLane];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + kWarps * u;
      const int sc = min(s, p.splits - 1);
      wt[u] = ml_of(sc).x;  // (its weight below, once every load of the batch is in flight)
      const float* src = p.part_o + (sc * R + idx) * kHeadDim;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int quad = min(lane + 32 * i, kQuads - 1);
        x[u][i] = *reinterpret_cast<const float4*>(src + 4 * quad);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (s0 + kWarps * u >= p.splits) break;
      const float w = weight(wt[u]);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] = fma4(w, x[u][i], acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + 32 * i < kQuads) s_o[warp][lane + 32 * i] = acc[i];
  }
  __syncthreads();
  const int per_b = p.heads_kv * p.rows;
  const int b = static_cast<int>(idx / per_b);
  const int h_kv = static_cast<int>(idx % per_b) / p.rows;
  const int r = static_cast<int>(idx % per_b) % p.rows;
  for (int quad = t; quad < kQuads; quad += kMergeThreads) {
    float4 o = s_o[0][quad];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) o = add4(o, s_o[w][quad]);
    store_final(p, b, h_kv, r, 4 * quad, M, L, o);
  }
}

}  // namespace pasa::cuda
