// SPDX-License-Identifier: Apache-2.0
// The split-KV decode path's outputs: the final O rows and LSE of a packed row from its (M, L, O~),
// and the exact merge of a group's split partials, which both the split kernel's last split of a group
// and the merge kernel run (attention_decode_kernel.cuh; decode_params.h says which runs when).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/arch/ptx.cuh"
#include "cuda/block/epilogue.cuh"
#include "cuda/block/online_softmax.cuh"
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

constexpr int kMergeThreads = DecodeTile::kWarps * 32;  // the split kernel's threads, and the merge kernel's
// Each item's splits are folded in this many interleaved ways (split s in way s % kMergeWays), whose
// results are then folded in way order: the arithmetic of an item, whether one thread takes all its
// ways or kMergeWays threads take one each.
constexpr int kMergeWays = 4;
// Shared memory merge_rows may use: a (m, l, O~ piece) of 6 floats for each of kMergeThreads threads.
constexpr int kMergeScratchFloats = kMergeThreads * 6;

namespace merge_detail {

// A running (m, l, O~ piece) of the merge, m in base-2 units (-inf: nothing seen yet).
struct Partial {
  float m = -INFINITY, l = 0.0f;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
};

// Folds kCount terms (m, l, O~ piece) into `run`: entries first, first + kStride, ... of ml and x, in
// that order, each weighed 2^(m - ref) against ref, the max of run's m and theirs (the online softmax's
// step; an absent term, m = -inf, weighs 0).
template <int kCount, int kStride, int kN>
__device__ __forceinline__ void fold(Partial& run, const float2 (&ml)[kN], const float4 (&x)[kN], int first) {
  float m = run.m;
#pragma unroll
  for (int u = 0; u < kCount; ++u) m = fmaxf(m, ml[first + kStride * u].x);
  const float ref = m == -INFINITY ? 0.0f : m;
  const float c = exp2f(run.m - ref);
  run.m = m;
  // (explicit roundings: where the compiler fuses a multiply into an add depends on the code around
  // it, and the two ways of running an item must round alike)
  run.l = __fmul_rn(run.l, c);
  run.o = make_float4(__fmul_rn(run.o.x, c), __fmul_rn(run.o.y, c), __fmul_rn(run.o.z, c), __fmul_rn(run.o.w, c));
#pragma unroll
  for (int u = 0; u < kCount; ++u) {
    const float2 t = ml[first + kStride * u];
    const float4 o = x[first + kStride * u];
    const float w = exp2f(t.x - ref);
    run.l = __fmaf_rn(w, t.y, run.l);
    run.o = make_float4(__fmaf_rn(w, o.x, run.o.x), __fmaf_rn(w, o.y, run.o.y), __fmaf_rn(w, o.z, run.o.z),
                        __fmaf_rn(w, o.w, run.o.w));
  }
}

// One term, for folding the ways' results.
__device__ __forceinline__ void fold_one(Partial& run, const Partial& way) {
  const float2 ml[1] = {make_float2(way.m, way.l)};
  const float4 x[1] = {way.o};
  fold<1, 1>(run, ml, x, 0);
}

}  // namespace merge_detail

// Exact merge of a group's splits (algorithms.md section 1): rows [first, first + count) of the group
// whose packed rows start at r0, of K/V head h_kv of sequence b (the last split CTA takes all of the
// group's rows, the merge kernel a row a CTA). The merge's time is its chain of dependent reads, so each item, a (row,
// 4-column piece), reads the m, l and O~ of many splits at once: kUnroll a batch, kUnroll /
// kMergeWays of each way. Where a CTA has kMergeWays threads for each of its items, each thread takes
// a way and the ways fold through `scratch` (shared memory), else a thread takes all the ways of an
// item. An item's arithmetic is the same either way and does not depend on which rows a CTA takes, so
// both merges give the same bits. Partials of the unified max (m = phi) and of the synchronized
// fallback (their own m) are weighed alike; with a counter, the rows some split flagged are counted.
template <int kHeadDim>
__device__ __forceinline__ void merge_rows(const DecodeParams& p, int b, int h_kv, int r0, int first, int count,
                                           float* scratch) {
  using merge_detail::Partial;
  constexpr int kQuads = kHeadDim / 4;
  // (32: one batch of loads for the 22-33 splits of B 1 at d 128; 16 at d 256, whose split kernel is
  // at the register limit already)
  constexpr int kUnroll = kHeadDim <= 128 ? 32 : 16;
  constexpr int kWayUnroll = kUnroll / kMergeWays;
  static_assert(kUnroll % kMergeWays == 0, "a batch holds whole ways: split s is in way s % kMergeWays");
  const std::int64_t R = static_cast<std::int64_t>(gridDim.z) * p.heads_kv * p.rows;  // (both kernels: grid z = B)
  const std::int64_t row0 = (static_cast<std::int64_t>(b) * p.heads_kv + h_kv) * p.rows + r0;
  const int items = count * kQuads, item0 = first * kQuads;  // this CTA's
  const int t = static_cast<int>(threadIdx.x);
  // Split s's (m, l) and O~ piece of an item ((-inf, 0) and 0 past the last split).
  const auto load = [&](int s, int item, float2& ml, float4& x) {
    ml = make_float2(-INFINITY, 0.0f);
    x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (s < p.splits) {
      const std::int64_t i = s * R + row0 + item / kQuads;
      ml = __ldcg(reinterpret_cast<const float2*>(p.part_ml + i * 2));
      x = __ldcg(reinterpret_cast<const float4*>(p.part_o + i * kHeadDim + (item % kQuads) * 4));
    }
  };
  const auto store = [&](int item, const Partial& run) {
    store_final(p, b, h_kv, r0 + item / kQuads, (item % kQuads) * 4, run.m, run.l, run.o);
  };

  if (items * kMergeWays <= kMergeThreads) {
    // A thread a way (thread t = way items + (item - item0)): the ways' results meet in scratch.
    Partial run;
    const int item = item0 + t % items, way = t / items;
    if (t < items * kMergeWays) {
      for (int s0 = 0; s0 < p.splits; s0 += kUnroll) {
        float2 ml[kWayUnroll];
        float4 x[kWayUnroll];
#pragma unroll
        for (int u = 0; u < kWayUnroll; ++u) load(s0 + way + kMergeWays * u, item, ml[u], x[u]);
        merge_detail::fold<kWayUnroll, 1>(run, ml, x, 0);
      }
      scratch[t * 2] = run.m;
      scratch[t * 2 + 1] = run.l;
      reinterpret_cast<float4*>(scratch + 2 * kMergeThreads)[t] = run.o;
    }
    __syncthreads();
    if (t < items) {
      Partial total;
#pragma unroll
      for (int w = 0; w < kMergeWays; ++w) {
        const int slot = w * items + t;
        Partial part;
        part.m = scratch[slot * 2];
        part.l = scratch[slot * 2 + 1];
        part.o = reinterpret_cast<const float4*>(scratch + 2 * kMergeThreads)[slot];
        merge_detail::fold_one(total, part);
      }
      store(item0 + t, total);
    }
  } else {
    // A thread an item, its ways side by side.
    for (int i = t; i < items; i += kMergeThreads) {
      const int item = item0 + i;
      Partial run[kMergeWays];
      for (int s0 = 0; s0 < p.splits; s0 += kUnroll) {
        float2 ml[kUnroll];
        float4 x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) load(s0 + u, item, ml[u], x[u]);
#pragma unroll
        for (int w = 0; w < kMergeWays; ++w) merge_detail::fold<kWayUnroll, kMergeWays>(run[w], ml, x, w);
      }
      Partial total;
#pragma unroll
      for (int w = 0; w < kMergeWays; ++w) merge_detail::fold_one(total, run[w]);
      store(item, total);
    }
  }
  if (p.counter != nullptr && t < count) {
    int flag = 0;
    for (int s = 0; s < p.splits; ++s) flag |= __ldcg(p.part_flag + s * R + row0 + first + t);
    if (flag != 0) atomicAdd(p.counter, 1);
  }
}

}  // namespace pasa::cuda
