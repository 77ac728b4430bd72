// SPDX-License-Identifier: Apache-2.0
// Instantiations of the split-KV decode kernel and its merge: head dims 64, 96, 128 and 256, one or
// two m16 row tiles per CTA (one at 256: decode_m_tiles), f16 / bf16 inputs, and bf16 inputs rounded
// to fp16 (the fdpp policy's input).
#include <string>

#include "cuda/kernels/attention_decode_kernel.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <int kHeadDim, int kMTiles>
void launch_types(const DecodeParams& p, int batch, ElemType in_type, bool to_half, cudaStream_t s) {
  if (in_type == ElemType::f16) {
    launch_decode_split_tile<DecodeTileOf<kHeadDim>, kMTiles, __half, false>(p, batch, s);
  } else if (in_type == ElemType::bf16) {
    to_half ? launch_decode_split_tile<DecodeTileOf<kHeadDim>, kMTiles, __nv_bfloat16, true>(p, batch, s)
            : launch_decode_split_tile<DecodeTileOf<kHeadDim>, kMTiles, __nv_bfloat16, false>(p, batch, s);
  } else {
    throw Error("decode kernel: inputs must be f16 or bf16");
  }
}

template <int kHeadDim>
void launch_tiles(const DecodeParams& p, int batch, int m_tiles, ElemType in_type, bool to_half, cudaStream_t s) {
  constexpr int kMaxMTiles = decode_tile(kHeadDim).max_m_tiles();
  if (m_tiles == 1) {
    launch_types<kHeadDim, 1>(p, batch, in_type, to_half, s);
    return;
  }
  if constexpr (kMaxMTiles == 2) {  // (no two-tile instantiation where a tile's O fills the registers)
    if (m_tiles == 2) {
      launch_types<kHeadDim, 2>(p, batch, in_type, to_half, s);
      return;
    }
  }
  throw Error("decode kernel: 1 to " + std::to_string(kMaxMTiles) + " row tiles per CTA at head dim " +
              std::to_string(kHeadDim));
}

}  // namespace

void launch_decode_split(const DecodeParams& p, int batch, int head_dim, int m_tiles, ElemType in_type,
                         bool to_half, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  switch (head_dim) {
    case 64: launch_tiles<64>(p, batch, m_tiles, in_type, to_half, s); break;
    case 96: launch_tiles<96>(p, batch, m_tiles, in_type, to_half, s); break;
    case 128: launch_tiles<128>(p, batch, m_tiles, in_type, to_half, s); break;
    case 256: launch_tiles<256>(p, batch, m_tiles, in_type, to_half, s); break;
    default: throw Error("decode kernel: head dim must be 64, 96, 128 or 256");
  }
}

void launch_decode_merge(const DecodeParams& p, int batch, int head_dim, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t rows = static_cast<std::int64_t>(batch) * p.heads_kv * p.rows;
  const dim3 grid(static_cast<unsigned>((rows + 3) / 4));
  switch (head_dim) {
    case 64: attention_decode_merge_kernel<64><<<grid, 128, 0, s>>>(p, batch); break;
    case 96: attention_decode_merge_kernel<96><<<grid, 128, 0, s>>>(p, batch); break;
    case 128: attention_decode_merge_kernel<128><<<grid, 128, 0, s>>>(p, batch); break;
    case 256: attention_decode_merge_kernel<256><<<grid, 128, 0, s>>>(p, batch); break;
    default: throw Error("decode merge: head dim must be 64, 96, 128 or 256");
  }
  check_launch("attention_decode_merge_kernel launch");
}

}  // namespace pasa::cuda
