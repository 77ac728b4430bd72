// SPDX-License-Identifier: Apache-2.0
// The pasa_fp16acc policy on the Hopper engine (pasa_hopper_launch.cuh; P V in fp16 accumulators,
// hopper_pasa_mainloop.cuh), compiled apart from pasa's and pasa_accurate's kernels.
#include "cuda/kernels/launch_dispatch.h"
#include "cuda/kernels/pasa_hopper_launch.cuh"

namespace pasa::cuda {

void launch_pasa_fp16acc(const PasaRequest& r, void* stream) {
  dispatch_16bit(r.call.in_type, "pasa_fp16acc kernel", [&]<typename QElem>() {
    dispatch_head_dim<64, 128>(r.call.head_dim, "pasa_fp16acc kernel", [&]<int D>() {
      launch_pasa_hopper<QElem, D, false, true>(r, static_cast<cudaStream_t>(stream));
    });
  });
}

}  // namespace pasa::cuda
