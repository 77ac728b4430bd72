// SPDX-License-Identifier: Apache-2.0
// The exact forward kernel's benchmark variants (bench/fwd_variants.cu): f16 inputs, any FwdParams.
#pragma once

#include "cuda/host/kernel_params.h"

namespace pasa::cuda {
void launch_fwd_variant(const FwdParams& p, int batch, int head_dim, FwdVariant v, void* stream);
}  // namespace pasa::cuda
