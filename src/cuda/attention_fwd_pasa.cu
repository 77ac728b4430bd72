// Instantiations of the forward kernel for the pasa policy: K' = M K and V in fp16 from the prepass
// (pasa_prepare.cu), Q in fp16 or bf16 (rounded to fp16 in shared memory), key blocks of
// kPasaBlockKv = 128 keys (PASA's s2), head dims 64 and 128, CTA shapes from fwd_tiles.h (pasa_tile).
#include "cuda/attention_fwd_kernel.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <typename QElem>
void launch_dim(const FwdParams& p, int batch, int head_dim, cudaStream_t s) {
  if (head_dim == 64) {
    launch_fwd<FwdTileOf<64, true>, QElem, true>(p, batch, s);
  } else if (head_dim == 128) {
    launch_fwd<FwdTileOf<128, true>, QElem, true>(p, batch, s);
  } else {
    throw Error("pasa kernel: head dim must be 64 or 128");
  }
}

}  // namespace

void launch_pasa_fwd(const FwdParams& p, int batch, int head_dim, ElemType q_type, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (q_type == ElemType::f16) {
    launch_dim<__half>(p, batch, head_dim, s);
  } else if (q_type == ElemType::bf16) {
    launch_dim<__nv_bfloat16>(p, batch, head_dim, s);
  } else {
    throw Error("pasa kernel: q must be f16 or bf16");
  }
}

}  // namespace pasa::cuda
