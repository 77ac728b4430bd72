// SPDX-License-Identifier: Apache-2.0
// Shared-memory barriers with transaction counts (mbarrier) and the bulk asynchronous copy that
// completes on them (sm_90): one thread starts a contiguous global -> shared copy, and the threads
// that need the data wait on the barrier's phase instead of on a CTA-wide __syncthreads. PTX ISA:
// "Parallel Synchronization and Communication Instructions: mbarrier", "cp.async.bulk".
#pragma once

#include <cstdint>

namespace pasa::cuda {

// `count` arrivals complete a phase (plus, with expect_tx, the announced bytes).
__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialized barriers visible to the other threads and to the async proxy (then __syncthreads).
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// One arrival that also announces `bytes` still to land through complete_tx.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to this CTA's shared memory;
// their arrival counts against barrier `bar`'s announced transaction bytes.
__device__ __forceinline__ void bulk_copy_to_shared(std::uint32_t dst, const void* src, std::uint32_t bytes,
                                                    std::uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

}  // namespace pasa::cuda
