// SPDX-License-Identifier: Apache-2.0
// The exact policy on the portable forward kernel (attention_fwd_kernel.cuh): sm_80 instructions only
// (mma.sync, ldmatrix, cp.async), compiled for every architecture of the build. The plain
// instantiations are here; a call with a sliding window, a softcap or an attention mask goes to
// ScoreMods::all's (attention_fwd_exact_score_mods.cu).
#include "cuda/kernels/attention_fwd_kernel.cuh"

namespace pasa::cuda {

void launch_exact_portable_fwd(const FwdParams& p, int batch, int head_dim, ElemType in_type, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.has_score_mods()) {
    launch_exact_portable_score_mods(p, batch, head_dim, in_type, s);
  } else {
    launch_exact_portable<ScoreMods::none>(p, batch, head_dim, in_type, s);
  }
}

}  // namespace pasa::cuda
