// The forward kernels' benchmark variants (bench/fwd_variants.cu): f16 inputs, any FwdParams (for
// pasa, p.k must already hold the prepass's K').
#pragma once

#include "cuda/kernel_params.h"

namespace pasa::cuda {
void launch_fwd_variant(const FwdParams& p, int batch, int head_dim, bool pasa, FwdVariant v, void* stream);
}  // namespace pasa::cuda
