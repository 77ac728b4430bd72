// SPDX-License-Identifier: Apache-2.0
// The decode kernel's benchmark variants (decode_params.h, DecodeVariant): each changes one lever of
// the tuned shape (stages, the L2 prefetch hint, the K / V rows' layout), so that one benchmark run
// prices each lever. Built into bench_attention only (not into the library).
#include "decode_variants.h"

#include "cuda/kernels/attention_decode_kernel.cuh"
#include "pasa/error.h"

namespace pasa::cuda {

void launch_decode_variant(const DecodeParams& p, int batch, DecodeVariant v, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  using Elem = __nv_bfloat16;
  switch (v) {
    case DecodeVariant::tuned: launch_decode_split_tile<DecodeTileOf<128, 0>, 1, Elem, false>(p, batch, false, s); break;
    case DecodeVariant::stages2: launch_decode_split_tile<DecodeTileOf<128, 1>, 1, Elem, false>(p, batch, false, s); break;
    case DecodeVariant::stages4: launch_decode_split_tile<DecodeTileOf<128, 2>, 1, Elem, false>(p, batch, false, s); break;
    case DecodeVariant::no_prefetch: launch_decode_split_tile<DecodeTileOf<128, 3>, 1, Elem, false>(p, batch, false, s); break;
    case DecodeVariant::prefetch256: launch_decode_split_tile<DecodeTileOf<128, 4>, 1, Elem, false>(p, batch, false, s); break;
    case DecodeVariant::padded_kv: launch_decode_split_tile<DecodeTileOf<128, 5>, 1, Elem, false>(p, batch, false, s); break;
  }
}

}  // namespace pasa::cuda
