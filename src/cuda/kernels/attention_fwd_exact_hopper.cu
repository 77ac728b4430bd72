// SPDX-License-Identifier: Apache-2.0
// The exact policy's sm_90a entry point (head dims 64 and 128). It runs the portable mma.sync kernel
// until a Hopper kernel of its own replaces this file; the dispatch already routes sm_90 here.
#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

void launch_exact_fwd(const FwdParams& p, int batch, int head_dim, ElemType in_type, void* stream) {
  launch_exact_portable_fwd(p, batch, head_dim, in_type, stream);
}

}  // namespace pasa::cuda
