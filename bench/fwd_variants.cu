// The forward kernels' benchmark variants (fwd_tiles.h, FwdVariant), f16 inputs: each changes one
// lever of bench/NOTES.md in the tuned shape, so that one benchmark run prices each lever. Built
// into bench_attention only (not into the library).
#include "fwd_variants.h"

#include "cuda/attention_fwd_kernel.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <int kHeadDim, bool kPasa>
void launch_variant(const FwdParams& p, int batch, FwdVariant v, cudaStream_t s) {
  switch (v) {
    case FwdVariant::tuned: launch_fwd<FwdTileOf<kHeadDim, kPasa, 0>, __half, kPasa>(p, batch, s); break;
    case FwdVariant::other_stages: launch_fwd<FwdTileOf<kHeadDim, kPasa, 1>, __half, kPasa>(p, batch, s); break;
    case FwdVariant::v1_shape: launch_fwd<FwdTileOf<kHeadDim, kPasa, 2>, __half, kPasa>(p, batch, s); break;
    case FwdVariant::direct_epilogue: launch_fwd<FwdTileOf<kHeadDim, kPasa, 3>, __half, kPasa>(p, batch, s); break;
    case FwdVariant::warps8: launch_fwd<FwdTileOf<kHeadDim, kPasa, 4>, __half, kPasa>(p, batch, s); break;
    case FwdVariant::half_block_n:
      if constexpr (kPasa) {
        throw Error("pasa variants: the key block is PASA's s2");
      } else {
        launch_fwd<FwdTileOf<kHeadDim, kPasa, 5>, __half, kPasa>(p, batch, s);
      }
      break;
  }
}

}  // namespace

void launch_fwd_variant(const FwdParams& p, int batch, int head_dim, bool pasa, FwdVariant v, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (head_dim == 64) {
    pasa ? launch_variant<64, true>(p, batch, v, s) : launch_variant<64, false>(p, batch, v, s);
  } else if (head_dim == 128) {
    pasa ? launch_variant<128, true>(p, batch, v, s) : launch_variant<128, false>(p, batch, v, s);
  } else {
    throw Error("variants: head dim must be 64 or 128");
  }
}

}  // namespace pasa::cuda
