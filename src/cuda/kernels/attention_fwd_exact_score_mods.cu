// SPDX-License-Identifier: Apache-2.0
// The portable exact kernel's instantiations with the sliding window, the logit softcap and the
// attention mask (ScoreMods::all), in a translation unit of their own so that they compile beside the
// plain ones (attention_fwd_exact.cu).
#include "cuda/kernels/attention_fwd_kernel.cuh"

namespace pasa::cuda {

void launch_exact_portable_score_mods(const FwdParams& p, int batch, int head_dim, ElemType in_type,
                                      cudaStream_t s) {
  launch_exact_portable<ScoreMods::all>(p, batch, head_dim, in_type, s);
}

}  // namespace pasa::cuda
