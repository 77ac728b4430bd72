// SPDX-License-Identifier: Apache-2.0
// Warpgroup-level controls of warp-specialized Hopper kernels (sm_90a): moving registers between the
// warpgroups of a CTA (setmaxnreg: the producer gives up what it does not need so that the consumers
// can hold their accumulators), and named barriers that synchronize a subset of the CTA's warps.
// PTX ISA: "setmaxnreg", "bar.sync".
#pragma once

namespace pasa::cuda {

// Every thread of the warpgroup executes these, with the same count (a multiple of 8 in [24, 256]).
template <int kRegs>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Barrier `id` (1..15: 0 is __syncthreads') over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace pasa::cuda
