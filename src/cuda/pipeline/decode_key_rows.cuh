// SPDX-License-Identifier: Apache-2.0
// Where the split-KV decode kernel's key rows come from: a dense K / V, or a paged KV cache's blocks.
#pragma once

#include <cstdint>
#include <type_traits>

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

  // A paged tile's sources: the global addresses of this thread's chunks of K and V (null for a row
  // to zero-fill), rows [n0, n0 + valid) with the block ids of a look_up(n0, rows >= valid). Worked
  // out before the wait for the tile before, so that load issues the copies right after the barrier;
  // at head dim 256 (16 chunks a thread, whose 64 address registers would spill) load works each out
  // as it copies it.
  static constexpr bool kEarlySources = Rows::kCount <= 8;
  struct Addresses {
    const Elem* k[Rows::kCount];
    const Elem* v[Rows::kCount];
  };
  struct Deferred {
    int n0, valid;
    Blocks blocks;
  };
  using Sources = std::conditional_t<kEarlySources, Addresses, Deferred>;

  __device__ __forceinline__ Sources sources(int n0, int valid, const Blocks& blocks) const {
    if constexpr (kEarlySources) {
      Addresses a{};
      if (!paged()) return a;
#pragma unroll
      for (int i = 0; i < Rows::kCount; ++i) {
        const auto [k_src, v_src] = chunk_sources(n0, valid, blocks, i);
        a.k[i] = k_src;
        a.v[i] = v_src;
      }
      return a;
    } else {
      return Deferred{n0, valid, blocks};
    }
  }

  // The copies of rows [n0, n0 + valid) (rows past `valid` zero-filled); a paged cache's from
  // sources(n0, valid, ...).
  __device__ __forceinline__ void load(Elem* smem_k, Elem* smem_v, int n0, int valid, const Sources& src) const {
    const Operand& k = p.fwd.k;
    const Operand& v = p.fwd.v;
    if (!paged()) {
      const std::int64_t k_row0 = b * k.stride_b + static_cast<std::int64_t>(n0) * k.stride_s;
      const std::int64_t v_row0 = b * v.stride_b + static_cast<std::int64_t>(n0) * v.stride_s;
      load_tile_async<kRows, kHeadDim, kThreads, Elem, kPrefetch>(smem_k, k_head + k_row0, k.stride_s, valid);
      load_tile_async<kRows, kHeadDim, kThreads, Elem, kPrefetch>(smem_v, v_head + v_row0, v.stride_s, valid);
      return;
    }
    load_rows_async<kRows, kHeadDim, kThreads, Elem, kPrefetch>(smem_k, smem_v, [&](int i) {
      if constexpr (kEarlySources) {
        return Pair{src.k[i], src.v[i]};
      } else {
        return chunk_sources(src.n0, src.valid, src.blocks, i);
      }
    });
  }

 private:
  struct Pair {
    const Elem* k;
    const Elem* v;
  };
  // The K and V addresses of this thread's i-th chunk of rows [n0, n0 + valid) (null past valid or
  // for a block id outside the pool).
  __device__ __forceinline__ Pair chunk_sources(int n0, int valid, const Blocks& blocks, int i) const {
    const int slot_mask = (1 << p.cache.block_shift) - 1;
    const int block = blocks.id[i];
    const int col = ((static_cast<int>(threadIdx.x) + i * kThreads) % Rows::kChunksPerRow) * 8;
    if (!(Rows::row(i) < valid && block >= 0 && block < p.cache.num_blocks)) return Pair{nullptr, nullptr};
    const std::int64_t at = block * p.fwd.k.stride_b + ((n0 + Rows::row(i)) & slot_mask) * p.fwd.k.stride_s + col;
    return Pair{k_head + at, v_head + at};
  }
};

}  // namespace pasa::cuda
