// SPDX-License-Identifier: Apache-2.0
// The pasa_fp16acc policy on the Hopper engine (pasa_hopper_launch.cuh; P V in fp16 accumulators,
// hopper_pasa_mainloop.cuh), compiled apart from pasa's and pasa_accurate's kernels.
#include "cuda/kernels/launch_dispatch.h"
#include "cuda/kernels/pasa_hopper_launch.cuh"

namespace pasa::cuda {

void launch_pasa_fp16acc(const PasaRequest& r, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const bool three64 = pasa_hopper::three_consumers64(r.call.fwd);
  dispatch_16bit(r.call.in_type, "pasa_fp16acc kernel", [&]<typename QElem>() {
    dispatch_head_dim<64, 128>(r.call.head_dim, "pasa_fp16acc kernel", [&]<int D>() {
      if constexpr (D == 64) {
        if (three64) {
          launch_pasa_hopper<QElem, D, false, true, 3>(r, s);
          return;
        }
      }
      launch_pasa_hopper<QElem, D, false, true>(r, s);
    });
  });
}

}  // namespace pasa::cuda
