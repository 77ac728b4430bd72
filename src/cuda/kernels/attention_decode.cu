// SPDX-License-Identifier: Apache-2.0
// Instantiations of the split-KV decode kernel and its merge: head dims 64 and 128, one or two m16
// row tiles per CTA, f16 / bf16 inputs, and bf16 inputs rounded to fp16 (the fdpp policy's input).
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
  if (m_tiles == 1) {
    launch_types<kHeadDim, 1>(p, batch, in_type, to_half, s);
  } else if (m_tiles == 2) {
    launch_types<kHeadDim, 2>(p, batch, in_type, to_half, s);
  } else {
    throw Error("decode kernel: 1 or 2 row tiles per CTA");
  }
}

}  // namespace

void launch_decode_split(const DecodeParams& p, int batch, int head_dim, int m_tiles, ElemType in_type,
                         bool to_half, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (head_dim == 64) {
    launch_tiles<64>(p, batch, m_tiles, in_type, to_half, s);
  } else if (head_dim == 128) {
    launch_tiles<128>(p, batch, m_tiles, in_type, to_half, s);
  } else {
    throw Error("decode kernel: head dim must be 64 or 128");
  }
}

void launch_decode_merge(const DecodeParams& p, int batch, int head_dim, int pass, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t rows = static_cast<std::int64_t>(batch) * p.heads_kv * p.rows;
  const dim3 grid(static_cast<unsigned>((rows + 3) / 4));
  if (head_dim == 64) {
    attention_decode_merge_kernel<64><<<grid, 128, 0, s>>>(p, batch, pass);
  } else if (head_dim == 128) {
    attention_decode_merge_kernel<128><<<grid, 128, 0, s>>>(p, batch, pass);
  } else {
    throw Error("decode merge: head dim must be 64 or 128");
  }
  check_launch("attention_decode_merge_kernel launch");
}

}  // namespace pasa::cuda
