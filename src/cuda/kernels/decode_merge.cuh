// SPDX-License-Identifier: Apache-2.0
// The end of the split-KV decode path (decode_params.h): writing a packed row's final O and LSE, and
// the exact merge of the splits' partials (algorithms.md section 1), in two forms. Eager calls merge
// inside the split kernel: its last CTA of each (batch, K/V head, row chunk) to finish, found by an
// arrival counter, merges that group's rows, so a call is one launch (the host's floor for a launch
// is a few microseconds, the whole budget of a decode step's host time). Calls captured in a CUDA
// graph, where host time is spent once, run the merge kernel after the split kernel instead: a warp
// per packed row as well, but every row's warp starts when the split kernel ends, where the group's
// last CTA starts only when it is the last (bench/NOTES.md measured the difference).
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

// The exact merge of packed row `row` of K/V head (b, h_kv) (row index idx of the partials) by one
// warp: the lanes take the row's float4 pieces and read kUnroll splits' (m, l, flag, O~) at a time,
// all in flight together (indices past the end clamped and skipped), and fold them into a running
// (M, L, O) as the online softmax folds key blocks: one chain of reads, no separate pass for the
// maximum. Partials of the unified max (m = phi) and of the synchronized fallback (their own m) are
// weighed alike; with a counter, the rows some split flagged are counted. Both merges run this one
// function, with its roundings written out, so an eager call and a captured one give the same bits.
// The partials are read past L1 (__ldcg): other CTAs wrote them.
template <int kHeadDim>
__device__ __forceinline__ void merge_row(const DecodeParams& p, int b, int h_kv, int row, std::int64_t R,
                                          std::int64_t idx, int lane) {
  constexpr int kQuads = kHeadDim / 4;
  constexpr int kPerLane = (kQuads + 31) / 32;
  constexpr int kUnroll = 16 / kPerLane;  // (64 registers of loads in flight, within the kernels' budget)
  float M = -INFINITY, L = 0.0f;
  float4 acc[kPerLane] = {};
  int flag = 0;
  for (int s0 = 0; s0 < p.splits; s0 += kUnroll) {
    float2 ml[kUnroll];
    int flags[kUnroll];
    float4 x[kUnroll][kPerLane];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t at = min(s0 + u, p.splits - 1) * R + idx;
      ml[u] = __ldcg(reinterpret_cast<const float2*>(p.part_ml) + at);
      flags[u] = __ldcg(p.part_flag + at);
      const float4* src = reinterpret_cast<const float4*>(p.part_o + at * kHeadDim);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) x[u][i] = __ldcg(src + min(lane + 32 * i, kQuads - 1));
    }
    float m_new = M;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (s0 + u < p.splits) m_new = fmaxf(m_new, ml[u].x);
    }
    // Weights 2^(m - m_new): 0 for what saw no key (m = -inf); m_new = -inf: nothing seen yet.
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float rescale = exp2f(M - m_ref);
    L = __fmul_rn(L, rescale);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      acc[i] = make_float4(__fmul_rn(acc[i].x, rescale), __fmul_rn(acc[i].y, rescale), __fmul_rn(acc[i].z, rescale),
                           __fmul_rn(acc[i].w, rescale));
    }
    // (Past the end: selected away, not branched around; a branch lets the compiler sink each load to
    // its use, one round trip after another.)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool valid = s0 + u < p.splits;
      const float w = exp2f(ml[u].x - m_ref);
      flag |= valid ? flags[u] : 0;
      L = valid ? __fmaf_rn(w, ml[u].y, L) : L;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const float4 sum = make_float4(__fmaf_rn(w, x[u][i].x, acc[i].x), __fmaf_rn(w, x[u][i].y, acc[i].y),
                                       __fmaf_rn(w, x[u][i].z, acc[i].z), __fmaf_rn(w, x[u][i].w, acc[i].w));
        acc[i] = valid ? sum : acc[i];
      }
    }
    M = m_new;
  }
  if (flag && lane == 0 && p.counter != nullptr) atomicAdd(p.counter, 1);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + 32 * i < kQuads) store_final(p, b, h_kv, row, 4 * (lane + 32 * i), M, L, acc[i]);
  }
}

// The merge by the group's last split CTA: warp w merges packed rows row_begin + w, + kWarps, ...
template <int kHeadDim, int kWarps>
__device__ void merge_rows(const DecodeParams& p, int b, int h_kv, int row_begin, int row_end, std::int64_t R,
                           std::int64_t head_row0, int warp, int lane) {
  for (int row = row_begin + warp; row < row_end; row += kWarps) {
    merge_row<kHeadDim>(p, b, h_kv, row, R, head_row0 + row, lane);
  }
}

// The merge kernel: a warp per packed row, kMergeThreads / 32 rows a CTA. (A register cap instead of
// launch bounds: with those ptxas kept the head dim 64 instance at 128 registers and spilled.)
constexpr int kMergeThreads = 128;

template <int kHeadDim>
__global__ void __maxnreg__(168) attention_decode_merge_kernel(const __grid_constant__ DecodeParams p,
                                                                              int batch) {
  wait_for_previous_grid();  // the split kernel's partials
  const std::int64_t R = static_cast<std::int64_t>(batch) * p.heads_kv * p.rows;
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * (kMergeThreads / 32) + threadIdx.x / 32;
  if (idx >= R) return;
  const int per_b = p.heads_kv * p.rows;
  const int b = static_cast<int>(idx / per_b);
  const int h_kv = static_cast<int>(idx % per_b) / p.rows;
  const int r = static_cast<int>(idx % per_b) % p.rows;
  merge_row<kHeadDim>(p, b, h_kv, r, R, idx, static_cast<int>(threadIdx.x) % 32);
}

}  // namespace pasa::cuda
