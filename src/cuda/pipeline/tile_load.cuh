// SPDX-License-Identifier: Apache-2.0
// Global -> shared tile copies for the attention mainloop: kRows rows of kHeadDim 16-bit elements,
// 16 bytes per cp.async, rows past the end of the sequence zero-filled (so tails compute on zeros,
// never on garbage). The shared tile's layout (smem_rows.cuh) is a parameter: rows padded by 16
// bytes by default (row r starts at bank 4r mod 32 for head dims that are multiples of 64, 20r mod 32
// at head dim 96: eight rows cover all 32 banks either way), or swizzled unpadded rows.
//
// Thread t copies column chunk t % kChunksPerRow of rows t / kChunksPerRow + i kRowStep: a warp's
// copy covers whole rows (coalesced), and the thread's shared addresses are one base plus
// compile-time offsets, its global addresses one pointer plus multiples of one step (nothing per
// chunk stays live across the mainloop).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/arch/ptx.cuh"
#include "cuda/pipeline/smem_rows.cuh"

namespace pasa::cuda {

// Elements per shared-memory row of a tile with head dim kHeadDim (16 bytes of padding).
template <int kHeadDim>
constexpr int smem_row_stride() {
  return kHeadDim + 8;
}

// The layout of a tile of kHeadDim-element rows: padded (kSwizzled false) or swizzled (smem_rows.cuh).
template <bool kSwizzled, int kHeadDim>
using TileRows = std::conditional_t<kSwizzled, SwizzledRows<kHeadDim>, PaddedRows<smem_row_stride<kHeadDim>()>>;

// Copies kRows rows (row r at base + r * row_stride) into `smem`, laid out as Rows says; rows r >=
// rows_valid are zero-filled and not read. Issued by all kThreads threads of the CTA; the caller
// commits the group. kPrefetch: the cp.async's L2 prefetch size hint (0: none). Where the CTA's
// thread count is not a multiple of a row's chunks (head dim 96: 12 chunks a row), thread t copies
// chunks t, t + kThreads, ... in row-major order instead, each with its own address.
template <int kRows, int kHeadDim, int kThreads, typename Elem, int kPrefetch = 0,
          class Rows = TileRows<false, kHeadDim>>
__device__ __forceinline__ void load_tile_async(Elem* smem, const Elem* base, std::int64_t row_stride,
                                                int rows_valid) {
  constexpr int kChunksPerRow = kHeadDim / 8;  // 8 elements = 16 bytes
  static_assert(kHeadDim % 8 == 0, "whole 16-byte chunks");
  const std::uint32_t tile = smem_addr(smem);
  const unsigned tid = threadIdx.x;
  if constexpr (kThreads % kChunksPerRow != 0) {
    constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
      const int c = static_cast<int>(tid) + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) {
        const int row = c / kChunksPerRow;
        const int col = (c % kChunksPerRow) * 8;
        const bool valid = row < rows_valid;
        cp_async_16_hint<kPrefetch>(tile + Rows::chunk(row, col / 8), valid ? base + row * row_stride + col : base,
                                    valid);
      }
    }
  } else {
    constexpr int kRowStep = kThreads / kChunksPerRow;  // rows covered by one pass of the CTA
    static_assert(kRows % kRowStep == 0, "tile must split evenly over the CTA");
    const int row = static_cast<int>(tid / kChunksPerRow);
    const int chunk = static_cast<int>(tid % kChunksPerRow);
    const Elem* src = base + row * row_stride + chunk * 8;
    const std::int64_t step = kRowStep * row_stride;
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) {
      const bool valid = row + i * kRowStep < rows_valid;
      cp_async_16_hint<kPrefetch>(tile + Rows::chunk(row + i * kRowStep, chunk), valid ? src : base, valid);
      src += step;
    }
  }
}

// The rows of the chunks a thread copies in load_tile_async's order (chunks t, t + kThreads, ... in
// row-major order, which is also what its other order amounts to): row(i) of the i-th, -1 past the tile,
// and col(i) its first element. Where the thread count is a multiple of a row's chunks (kRegular), the
// i-th row is the first plus i kThreads / kChunksPerRow and the column is the same for all: written so,
// the compiler keeps one row and one column a thread instead of a division and a test per chunk.
template <int kRows, int kHeadDim, int kThreads>
struct ThreadRows {
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kChunks = kRows * kChunksPerRow;
  static constexpr int kCount = (kChunks + kThreads - 1) / kThreads;
  static constexpr bool kRegular = kThreads % kChunksPerRow == 0 && kChunks % kThreads == 0;
  static constexpr int kRowStep = kThreads / kChunksPerRow;  // (kRegular) rows between a thread's chunks
  __device__ __forceinline__ static int row(int i) {
    const unsigned tid = threadIdx.x;
    if constexpr (kRegular) return static_cast<int>(tid / kChunksPerRow) + i * kRowStep;
    const int c = static_cast<int>(tid) + i * kThreads;
    return c < kChunks ? c / kChunksPerRow : -1;
  }
  __device__ __forceinline__ static int col(int i) {
    const unsigned tid = threadIdx.x;
    if constexpr (kRegular) return static_cast<int>(tid % kChunksPerRow) * 8;
    return ((static_cast<int>(tid) + i * kThreads) % kChunksPerRow) * 8;
  }
};

// load_tile_async's copy (the same chunks to the same threads) of two tiles whose rows share their
// offsets (K and V of one paged cache), each row at its own element offset from base_a and base_b:
// offset[i] for the row of the thread's i-th chunk (ThreadRows), copied where valid[i], zero-filled
// (nothing read) where not.
template <int kRows, int kHeadDim, int kThreads, typename Elem, int kPrefetch = 0,
          class Rows = TileRows<false, kHeadDim>>
__device__ __forceinline__ void load_rows_async(Elem* smem_a, Elem* smem_b, const Elem* base_a, const Elem* base_b,
                                                const std::int64_t (&offset)[ThreadRows<kRows, kHeadDim, kThreads>::kCount],
                                                const bool (&valid)[ThreadRows<kRows, kHeadDim, kThreads>::kCount]) {
  using Mine = ThreadRows<kRows, kHeadDim, kThreads>;
  const std::uint32_t tile_a = smem_addr(smem_a), tile_b = smem_addr(smem_b);
#pragma unroll
  for (int i = 0; i < Mine::kCount; ++i) {
    const int row = Mine::row(i);
    if (!Mine::kRegular && row < 0) continue;
    const int col = Mine::col(i);
    const std::int64_t at = valid[i] ? offset[i] + col : 0;  // (a zero-filling copy reads nothing)
    const std::uint32_t dst = Rows::chunk(row, col / 8);
    cp_async_16_hint<kPrefetch>(tile_a + dst, base_a + at, valid[i]);
    cp_async_16_hint<kPrefetch>(tile_b + dst, base_b + at, valid[i]);
  }
}

// bf16 -> fp16 in place, for the chunks this thread copied with the same load_tile_async<kRows,
// kHeadDim, kThreads> call (so that only its own, completed cp.async writes are read: call it after
// cp_async_wait and before the barrier that publishes the tile). Values beyond fp16's range become
// inf, as rounding to an fp16 input format does.
template <int kRows, int kHeadDim, int kThreads>
__device__ __forceinline__ void own_chunks_bf16_to_half(void* smem) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  constexpr int kStride = smem_row_stride<kHeadDim>();
  const unsigned tid = threadIdx.x;
  const auto convert = [](std::uint16_t* at) {
    uint4* chunk = reinterpret_cast<uint4*>(at);
    uint4 x = *chunk;
    std::uint32_t* w = &x.x;
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = bf16x2_to_half2(w[e]);
    *chunk = x;
  };
  auto* tile = static_cast<std::uint16_t*>(smem);
  if constexpr (kThreads % kChunksPerRow != 0) {  // load_tile_async's row-major chunk order
    constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
      const int c = static_cast<int>(tid) + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) {
        convert(tile + (c / kChunksPerRow) * kStride + (c % kChunksPerRow) * 8);
      }
    }
  } else {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    const int row = static_cast<int>(tid / kChunksPerRow);
    const int col = static_cast<int>(tid % kChunksPerRow) * 8;
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) convert(tile + (row + i * kRowStep) * kStride + col);
  }
}

}  // namespace pasa::cuda
