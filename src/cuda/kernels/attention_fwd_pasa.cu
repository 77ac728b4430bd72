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
  dispatch_pasa<64, 128>(r, "pasa kernel", [&]<typename QElem, int D, bool kAccurate>() {
    launch_pasa_hopper<QElem, D, kAccurate, false>(r, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace pasa::cuda
