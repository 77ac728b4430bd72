// SPDX-License-Identifier: Apache-2.0
// How a shared-memory tile of 16-bit rows places its 16-byte chunks, for the cp.async copies that
// fill it (tile_load.cuh) and the ldmatrix reads of the mma.sync kernels (warp_mma.cuh). Both
// layouts keep every 8-row ldmatrix read conflict-free:
//
// - PaddedRows<kStride>: row r at r * kStride elements, kStride = head dim + 8 (16 bytes of padding
//   a row). Any head dim that is a multiple of 8. But a row then starts 16 r bytes past a 128-byte
//   boundary, so a warp's copy of a whole 128-byte line of global memory lands across two 128-byte
//   segments of shared memory, and the memory system splits it: on the H200 the decode kernel's
//   copies made 10.5 L2 requests and 24 sectors a warp instruction (512 bytes) padded, 4 and 16
//   swizzled, and read 5-6% faster (bench/NOTES.md, twenty-sixth session).
// - SwizzledRows<kElems>: unpadded rows (kElems a multiple of 64: whole 128-byte segments), chunk c
//   of row r at chunk position c ^ (r % 8) within its segment. A 128-byte line of a row lands in one
//   segment, permuted, and 8 rows' chunk c sit in 8 different bank groups.
//
// chunk(row, c) is the byte offset of chunk c of a row. A thread's ldmatrix row pointer is
// chunk(r, c) for its own row and chunk; moved(offset, dr, dc) is that pointer dr rows (a multiple
// of 8) and dc chunks further, where dc's low three bits and c's are disjoint (c < 2 with dc even, as
// every read here is): one add, or an add and a XOR, of constants. The tile's base address must be a
// multiple of 128 bytes for SwizzledRows, whose XOR acts on the address bits of the 128-byte segment.
#pragma once

#include <cstdint>

namespace pasa::cuda {

template <int kStride>
struct PaddedRows {
  static constexpr int kRowBytes = 2 * kStride;
  __host__ __device__ static constexpr std::uint32_t chunk(int row, int c) {
    return static_cast<std::uint32_t>(row * kRowBytes + c * 16);
  }
  __device__ __forceinline__ static constexpr std::uint32_t moved(std::uint32_t offset, int dr, int dc) {
    return offset + static_cast<std::uint32_t>(dr * kRowBytes + dc * 16);
  }
};

template <int kElems>
struct SwizzledRows {
  static_assert(kElems % 64 == 0, "whole 128-byte segments a row");
  static constexpr int kRowBytes = 2 * kElems;
  __host__ __device__ static constexpr std::uint32_t chunk(int row, int c) {
    return static_cast<std::uint32_t>(row * kRowBytes + (c ^ (row % 8)) * 16);
  }
  __device__ __forceinline__ static constexpr std::uint32_t moved(std::uint32_t offset, int dr, int dc) {
    const auto segment = static_cast<std::uint32_t>(dr * kRowBytes + (dc / 8) * 128);
    return (offset + segment) ^ static_cast<std::uint32_t>((dc % 8) * 16);
  }
};

}  // namespace pasa::cuda
