// SPDX-License-Identifier: Apache-2.0
// Instantiations of the split-KV decode kernel and its merge kernel: head dims 64, 96, 128 and 256, one or
// two m16 row tiles per CTA (one at 256: decode_m_tiles), f16 / bf16 inputs, and bf16 inputs rounded
// to fp16 (the fdpp policy's input); at head dim 128 also the compact tile of 99 KiB devices
// (decode_tile_for).
#include <algorithm>
#include <string>

#include "cuda/kernels/attention_decode_kernel.cuh"
#include "cuda/kernels/launch_dispatch.h"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <int kHeadDim, int kMTiles, int kVariant>
void launch_tile(const DecodeParams& p, int batch, ElemType in_type, bool to_half, bool dependent, cudaStream_t s) {
  using Tile = DecodeTileOf<kHeadDim, kVariant>;
  if (in_type == ElemType::f16) {
    launch_decode_split_tile<Tile, kMTiles, __half, false>(p, batch, dependent, s);
  } else if (in_type == ElemType::bf16) {
    to_half ? launch_decode_split_tile<Tile, kMTiles, __nv_bfloat16, true>(p, batch, dependent, s)
            : launch_decode_split_tile<Tile, kMTiles, __nv_bfloat16, false>(p, batch, dependent, s);
  } else {
    throw Error("decode kernel: inputs must be f16 or bf16");
  }
}

// decode_tile(kHeadDim), or at head dim 128 its compact tile (decode_tile_for).
template <int kHeadDim, int kMTiles>
void launch_types(const DecodeParams& p, int batch, bool compact, ElemType in_type, bool to_half, bool dependent,
                  cudaStream_t s) {
  if constexpr (kHeadDim == 128) {
    if (compact) {
      launch_tile<kHeadDim, kMTiles, static_cast<int>(DecodeVariant::stages2)>(p, batch, in_type, to_half,
                                                                              dependent, s);
      return;
    }
  }
  if (compact) throw Error("decode kernel: no compact tile at head dim " + std::to_string(kHeadDim));
  launch_tile<kHeadDim, kMTiles, static_cast<int>(DecodeVariant::tuned)>(p, batch, in_type, to_half, dependent, s);
}

}  // namespace

void launch_decode_split(const DecodeParams& p, int batch, int head_dim, int m_tiles, bool compact,
                         ElemType in_type, bool to_half, bool dependent, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  dispatch_head_dim<64, 96, 128, 256>(head_dim, "decode kernel", [&]<int D>() {
    constexpr int kMaxMTiles = decode_tile(D).max_m_tiles();
    if (m_tiles == 1) {
      launch_types<D, 1>(p, batch, compact, in_type, to_half, dependent, s);
      return;
    }
    if constexpr (kMaxMTiles == 2) {  // (no two-tile instantiation where a tile's O fills the registers)
      if (m_tiles == 2) {
        launch_types<D, 2>(p, batch, compact, in_type, to_half, dependent, s);
        return;
      }
    }
    throw Error("decode kernel: 1 to " + std::to_string(kMaxMTiles) + " row tiles per CTA at head dim " +
                std::to_string(D));
  });
}

void launch_decode_merge(const DecodeParams& p, int batch, int head_dim, bool dependent, void* stream) {
  // The split kernel's groups, a CTA a row: x the chunk's rows (CTAs past a short last chunk's rows
  // return at once).
  const dim3 grid(std::min(p.chunk_rows, p.rows), p.heads_kv * p.row_chunks, batch);
  dispatch_head_dim<64, 96, 128, 256>(head_dim, "decode merge", [&]<int D>() {
    launch_kernel(attention_decode_merge_kernel<D>, grid, dim3(kMergeThreads), 0, static_cast<cudaStream_t>(stream),
                  dependent, "attention_decode_merge_kernel launch", p);
  });
}

}  // namespace pasa::cuda
