// SPDX-License-Identifier: Apache-2.0
// Instantiations of the forward kernel for the exact policy: fp16 / bf16 inputs, head dims 64, 96, 128
// and 256, CTA shapes from fwd_tiles.h (exact_tile). sm_80 instructions only (mma.sync, ldmatrix,
// cp.async): the portable path, compiled for every architecture of the build.
#include "cuda/kernels/attention_fwd_kernel.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <typename Elem>
void launch_dim(const FwdParams& p, int batch, int head_dim, cudaStream_t s) {
  switch (head_dim) {
    case 64: launch_fwd<FwdTileOf<64>, Elem>(p, batch, s); break;
    case 96: launch_fwd<FwdTileOf<96>, Elem>(p, batch, s); break;
    case 128: launch_fwd<FwdTileOf<128>, Elem>(p, batch, s); break;
    case 256: launch_fwd<FwdTileOf<256>, Elem>(p, batch, s); break;
    default: throw Error("exact kernel: head dim must be 64, 96, 128 or 256");
  }
}

}  // namespace

void launch_exact_portable_fwd(const FwdParams& p, int batch, int head_dim, ElemType in_type, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (in_type == ElemType::f16) {
    launch_dim<__half>(p, batch, head_dim, s);
  } else if (in_type == ElemType::bf16) {
    launch_dim<__nv_bfloat16>(p, batch, head_dim, s);
  } else {
    throw Error("exact kernel: inputs must be f16 or bf16");
  }
}

}  // namespace pasa::cuda
