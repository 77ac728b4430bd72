// SPDX-License-Identifier: Apache-2.0
// Where the split-KV decode kernel's key rows come from: a dense K / V, or a paged KV cache's blocks.
#pragma once

#include <cstdint>

#include "cuda/host/decode_params.h"
#include "cuda/pipeline/tile_load.cuh"

namespace pasa::cuda {

// How the decode kernel finds its key rows: a dense operand's are one stride apart; a paged cache's
// are looked up in the block table, once per row for K and V together (the host checks that their
// strides agree), with shifts for the power-of-two block size. A tile's block ids (look_up) are read
// well before its copies (load) need them: the first tiles' before the sequence's length is known
// (bounded by the cache's capacity instead), every later tile's two tiles ahead of its copies.
template <int kRows, int kHeadDim, int kThreads, int kPrefetch, typename Elem>
struct KeyRows {
  using Rows = ThreadRows<kRows, kHeadDim, kThreads>;
  struct Blocks {
    int id[Rows::kCount];  // the block ids of this thread's rows of one tile (paged), -1: none
  };
  const DecodeParams& p;
  int b;
  const Elem* k_head;
  const Elem* v_head;

  __device__ KeyRows(const DecodeParams& params, int batch, int h_kv)
      : p(params), b(batch),
        k_head(static_cast<const Elem*>(params.fwd.k.data) + h_kv * params.fwd.k.stride_h),
        v_head(static_cast<const Elem*>(params.fwd.v.data) + h_kv * params.fwd.v.stride_h) {}

  __device__ __forceinline__ bool paged() const { return p.cache.block_table != nullptr; }

  // The block ids of rows [n0, n0 + rows) (paged caches; nothing read for a dense operand).
  __device__ __forceinline__ Blocks look_up(int n0, int rows) const {
    Blocks blocks{};
    if (!paged()) return blocks;
    const int* table = p.cache.block_table + static_cast<std::int64_t>(b) * p.cache.max_blocks;
#pragma unroll
    for (int i = 0; i < Rows::kCount; ++i) {
      const int row = Rows::row(i);
      blocks.id[i] = row >= 0 && row < rows ? table[(n0 + row) >> p.cache.block_shift] : -1;
    }
    return blocks;
  }

  // The copies of rows [n0, n0 + valid) (rows past `valid` zero-filled), with the block ids of a
  // look_up(n0, rows >= valid).
  __device__ __forceinline__ void load(Elem* smem_k, Elem* smem_v, int n0, int valid, const Blocks& blocks) const {
    const Operand& k = p.fwd.k;
    const Operand& v = p.fwd.v;
    if (!paged()) {
      const std::int64_t k_row0 = b * k.stride_b + static_cast<std::int64_t>(n0) * k.stride_s;
      const std::int64_t v_row0 = b * v.stride_b + static_cast<std::int64_t>(n0) * v.stride_s;
      load_tile_async<kRows, kHeadDim, kThreads, Elem, kPrefetch>(smem_k, k_head + k_row0, k.stride_s, valid);
      load_tile_async<kRows, kHeadDim, kThreads, Elem, kPrefetch>(smem_v, v_head + v_row0, v.stride_s, valid);
      return;
    }
    const int slot_mask = (1 << p.cache.block_shift) - 1;
    std::int64_t offset[Rows::kCount];
#pragma unroll
    for (int i = 0; i < Rows::kCount; ++i) {
      const int block = blocks.id[i];
      const bool inside = Rows::row(i) < valid && block >= 0 && block < p.cache.num_blocks;
      offset[i] = inside ? block * k.stride_b + ((n0 + Rows::row(i)) & slot_mask) * k.stride_s : -1;
    }
    load_rows_async<kRows, kHeadDim, kThreads, Elem, kPrefetch>(smem_k, smem_v, k_head, v_head, offset);
  }
};

}  // namespace pasa::cuda
