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
// Shared memory merge_rows may use: a (m, l, O~ piece) of 6 floats for each of kMergeThreads threads.
constexpr int kMergeScratchFloats = kMergeThreads * 6;

// Exact merge of a group's splits (algorithms.md section 1): rows [first, first + count) of the group's
// `rows` packed rows from r0 of K/V head h_kv of sequence b (the last split CTA takes all of them, the
// merge kernel a row a CTA). The merge's time is its chain of dependent reads, so every thread takes
// an item, a (row, 4-column piece), and reads the m, l and O~ of up to kUnroll splits at once (past the
// end: nothing), folded into a running max as the online softmax does; where the group has fewer
// items than a CTA has threads, `ways` threads share an item's splits (split s to way s % ways) and
// fold their results through `scratch` (shared memory) in way order. An item's arithmetic depends on
// the group alone, not on which rows a CTA takes, so both merges give the same bits. Partials of the
// unified max (m = phi) and of the synchronized fallback (their own m) are weighed alike; with a
// counter, the rows some split flagged are counted.
template <int kHeadDim>
__device__ __forceinline__ void merge_rows(const DecodeParams& p, int b, int h_kv, int r0, int rows, int first,
                                           int count, float* scratch) {
  constexpr int kQuads = kHeadDim / 4;
  // (32: one round of loads for the 22-27 splits of B 1 at d 128; 16 at d 256, whose kernel is at
  // the register limit already)
  constexpr int kUnroll = kHeadDim <= 128 ? 32 : 16;
  const std::int64_t R = static_cast<std::int64_t>(gridDim.z) * p.heads_kv * p.rows;  // (both kernels: grid z = B)
  const std::int64_t row0 = (static_cast<std::int64_t>(b) * p.heads_kv + h_kv) * p.rows + r0;
  const int ways = max(1, kMergeThreads / (rows * kQuads));
  const int items = count * kQuads, item0 = first * kQuads;  // this CTA's
  const int t = static_cast<int>(threadIdx.x);
  struct Partial {
    float m, l;
    float4 o;
  };
  // Rescales the running partial to the max of its m and m (base-2; -inf: nothing seen, weight 0),
  // then add(ref) adds the new terms, each weighted against that max, ref.
  const auto fold = [](Partial& run, float m, const auto& add) {
    const float m_new = fmaxf(run.m, m);
    const float ref = m_new == -INFINITY ? 0.0f : m_new;
    const float c = exp2f(run.m - ref);
    run.l *= c;
    run.o = make_float4(run.o.x * c, run.o.y * c, run.o.z * c, run.o.w * c);
    run.m = m_new;
    add(ref);
  };
  const auto add_weighted = [](Partial& run, float w, float l, float4 o) {
    run.l += w * l;
    run.o = make_float4(run.o.x + w * o.x, run.o.y + w * o.y, run.o.z + w * o.z, run.o.w + w * o.w);
  };

  for (int slot = t; slot < items * ways; slot += kMergeThreads) {  // (one pass when ways > 1)
    const int item = item0 + slot % items, way = slot / items;
    const std::int64_t row = row0 + item / kQuads;
    const int col = (item % kQuads) * 4;
    Partial run{-INFINITY, 0.0f, make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
    for (int s0 = way; s0 < p.splits; s0 += ways * kUnroll) {
      float2 ml[kUnroll];
      float4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int s = s0 + ways * u;
        ml[u] = make_float2(-INFINITY, 0.0f);
        x[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (s < p.splits) {
          ml[u] = __ldcg(reinterpret_cast<const float2*>(p.part_ml + (s * R + row) * 2));
          x[u] = __ldcg(reinterpret_cast<const float4*>(p.part_o + (s * R + row) * kHeadDim + col));
        }
      }
      float m = -INFINITY;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m = fmaxf(m, ml[u].x);
      fold(run, m, [&](float ref) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) add_weighted(run, exp2f(ml[u].x - ref), ml[u].y, x[u]);
      });
    }
    if (ways == 1) {
      store_final(p, b, h_kv, r0 + item / kQuads, col, run.m, run.l, run.o);
    } else {
      scratch[slot * 2] = run.m;
      scratch[slot * 2 + 1] = run.l;
      reinterpret_cast<float4*>(scratch + 2 * items * ways)[slot] = run.o;
    }
  }
  if (ways > 1) {
    __syncthreads();
    if (t < items) {
      Partial run{-INFINITY, 0.0f, make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
      for (int way = 0; way < ways; ++way) {
        const int slot = way * items + t;
        const float m = scratch[slot * 2];
        fold(run, m, [&](float ref) {
          add_weighted(run, exp2f(m - ref), scratch[slot * 2 + 1],
                       reinterpret_cast<const float4*>(scratch + 2 * items * ways)[slot]);
        });
      }
      const int item = item0 + t;
      store_final(p, b, h_kv, r0 + item / kQuads, (item % kQuads) * 4, run.m, run.l, run.o);
    }
  }
  if (p.counter != nullptr && t < count) {
    int flag = 0;
    for (int s = 0; s < p.splits; ++s) flag |= __ldcg(p.part_flag + s * R + row0 + first + t);
    if (flag != 0) atomicAdd(p.counter, 1);
  }
}

}  // namespace pasa::cuda
