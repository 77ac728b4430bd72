// SPDX-License-Identifier: Apache-2.0
// The decode kernel's benchmark variants (bench/decode_variants.cu): head dim 128, bf16 inputs, one
// m-tile (a GQA group of up to 16 packed rows), any DecodeParams.
#pragma once

#include "cuda/host/decode_params.h"

namespace pasa::cuda {
void launch_decode_variant(const DecodeParams& p, int batch, DecodeVariant v, void* stream);
}  // namespace pasa::cuda
