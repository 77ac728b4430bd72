// SPDX-License-Identifier: Apache-2.0
// The pasa_fp16acc policy on the Hopper engine (pasa_hopper_launch.cuh; P V in fp16 accumulators,
// hopper_pasa_mainloop.cuh), compiled apart from pasa's and pasa_accurate's kernels.
#include "cuda/kernels/launch_dispatch.h"
#include "cuda/kernels/pasa_hopper_launch.cuh"

namespace pasa::cuda {

void launch_pasa_fp16acc(const PasaRequest& r, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  // At D 64, three consumer warpgroups (192-row tiles): measured 1.09-1.17x two at 4k and 16k full,
  // 1.01-1.10x causal, 1.00-1.07x at 1k full; but 0.89-0.93x at 1k causal, where more of a 192-row
  // tile lies past the diagonal (bench/NOTES.md, thirty-seventh session). Causal calls up to 2k keep
  // two (2k itself not measured: the crossover lies between 1k and 4k).
  const FwdParams& p = r.call.fwd;
  const bool two_consumers64 = p.causal && p.seq_q <= 2048 && p.seq_kv <= 2048;
  dispatch_16bit(r.call.in_type, "pasa_fp16acc kernel", [&]<typename QElem>() {
    dispatch_head_dim<64, 128>(r.call.head_dim, "pasa_fp16acc kernel", [&]<int D>() {
      if constexpr (D == 64) {
        if (!two_consumers64) {
          launch_pasa_hopper<QElem, D, false, true, 3>(r, s);
          return;
        }
      }
      launch_pasa_hopper<QElem, D, false, true>(r, s);
    });
  });
}

}  // namespace pasa::cuda
