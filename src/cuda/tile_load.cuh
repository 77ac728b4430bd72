// Global -> shared tile copies for the attention mainloop: kRows rows of kHeadDim 16-bit elements,
// 16 bytes per cp.async, rows past the end of the sequence zero-filled (so tails compute on zeros,
// never on garbage). Shared tiles are padded by 16 bytes per row, which makes the 8-row ldmatrix
// reads conflict-free (row r starts at bank 4r mod 32).
#pragma once

#include <cstdint>

#include "cuda/ptx.cuh"

namespace pasa::cuda {

// Elements per shared-memory row of a tile with head dim kHeadDim (16 bytes of padding).
template <int kHeadDim>
constexpr int smem_row_stride() {
  return kHeadDim + 8;
}

// Copies kRows rows (row r at base + r * row_stride) into `smem`; rows r >= rows_valid are
// zero-filled and not read. Issued by all kThreads threads of the CTA; the caller commits the group.
template <int kRows, int kHeadDim, int kThreads, typename Elem>
__device__ __forceinline__ void load_tile_async(Elem* smem, const Elem* base, std::int64_t row_stride,
                                                int rows_valid) {
  constexpr int kChunksPerRow = kHeadDim / 8;  // 8 elements = 16 bytes
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile must split evenly over the CTA");
  constexpr int kStride = smem_row_stride<kHeadDim>();
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int chunk = i * kThreads + static_cast<int>(threadIdx.x);
    const int row = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    const bool valid = row < rows_valid;
    const Elem* src = valid ? base + row * row_stride + col : base;
    cp_async_16(smem_addr(smem + row * kStride + col), src, valid);
  }
}

}  // namespace pasa::cuda
