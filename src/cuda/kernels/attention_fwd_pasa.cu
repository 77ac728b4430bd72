// SPDX-License-Identifier: Apache-2.0
// The pasa and pasa_accurate policies on the Hopper engine (pasa_hopper_launch.cuh); pasa_fp16acc's
// kernels compile in attention_fwd_pasa_fp16acc.cu.
#include "cuda/kernels/launch_dispatch.h"
#include "cuda/kernels/pasa_hopper_launch.cuh"

namespace pasa::cuda {

void launch_pasa(const PasaRequest& r, void* stream) {
  if (r.fp16_accumulator) {
    launch_pasa_fp16acc(r, stream);
    return;
  }
  const auto s = static_cast<cudaStream_t>(stream);
  const bool three64 = pasa_hopper::three_consumers64(r.call.fwd);
  dispatch_pasa<64, 128>(r, "pasa kernel", [&]<typename QElem, int D, bool kAccurate>() {
    if constexpr (D == 64 && !kAccurate) {
      if (three64) {
        launch_pasa_hopper<QElem, D, false, false, 3>(r, s);
        return;
      }
    }
    launch_pasa_hopper<QElem, D, kAccurate, false>(r, s);
  });
}

}  // namespace pasa::cuda
