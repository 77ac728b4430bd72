// SPDX-License-Identifier: Apache-2.0
// The exact forward kernel's benchmark variants (fwd_tiles.h, FwdVariant), f16 inputs: each changes one
// lever of bench/NOTES.md in the tuned shape, so that one benchmark run prices each lever. Built
// into bench_attention only (not into the library).
#include "fwd_variants.h"

#include "cuda/kernels/attention_fwd_kernel.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <int kHeadDim>
void launch_variant(const FwdParams& p, int batch, FwdVariant v, cudaStream_t s) {
  switch (v) {
    case FwdVariant::tuned: launch_fwd<FwdTileOf<kHeadDim, 0>, __half>(p, batch, s); break;
    case FwdVariant::other_stages: launch_fwd<FwdTileOf<kHeadDim, 1>, __half>(p, batch, s); break;
    case FwdVariant::v1_shape: launch_fwd<FwdTileOf<kHeadDim, 2>, __half>(p, batch, s); break;
    case FwdVariant::direct_epilogue: launch_fwd<FwdTileOf<kHeadDim, 3>, __half>(p, batch, s); break;
    case FwdVariant::warps8: launch_fwd<FwdTileOf<kHeadDim, 4>, __half>(p, batch, s); break;
    case FwdVariant::half_block_n: launch_fwd<FwdTileOf<kHeadDim, 5>, __half>(p, batch, s); break;
    case FwdVariant::padded_kv: launch_fwd<FwdTileOf<kHeadDim, 6>, __half>(p, batch, s); break;
  }
}

}  // namespace

void launch_fwd_variant(const FwdParams& p, int batch, int head_dim, FwdVariant v, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (head_dim == 64) {
    launch_variant<64>(p, batch, v, s);
  } else if (head_dim == 128) {
    launch_variant<128>(p, batch, v, s);
  } else {
    throw Error("variants: head dim must be 64 or 128");
  }
}

}  // namespace pasa::cuda
