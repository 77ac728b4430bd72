// SPDX-License-Identifier: Apache-2.0
// A ring of kStages shared-memory slots between one producer thread (which fills a slot with bulk
// tensor copies) and the consumer warps (which read it with wgmma), on two mbarriers per slot:
// `full` completes when the slot's bytes have landed, `empty` when every consumer warp has released
// it. Fill number i (counted over the kernel's whole life, across tiles) uses slot i % kStages and
// phase (i / kStages) & 1; the producer waits on the opposite parity of `empty`, which a fresh
// barrier reports complete, so the first kStages fills do not wait. PTX ISA: "mbarrier".
#pragma once

#include <cstdint>

#include "cuda/arch/mbarrier.cuh"
#include "cuda/arch/ptx.cuh"

namespace pasa::cuda {

template <int kStages>
struct TileRing {
  std::uint64_t full[kStages];
  std::uint64_t empty[kStages];

  // One thread, before the CTA-wide barrier that publishes it: `consumers` arrivals free a slot.
  __device__ __forceinline__ void init(int consumers) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&full[s]), 1);
      mbar_init(smem_addr(&empty[s]), consumers);
    }
  }

  __device__ __forceinline__ static int slot(int i) { return i % kStages; }
  __device__ __forceinline__ static std::uint32_t parity(int i) { return (i / kStages) & 1; }

  // Producer: waits until fill i's slot is free, announces `bytes` to land on it, and returns the
  // barrier the copies complete on.
  __device__ __forceinline__ std::uint32_t acquire(int i, std::uint32_t bytes) {
    wait_free(i);
    return announce(i, bytes);
  }
  // acquire() in two steps, for a producer that writes something beside the slot in between.
  __device__ __forceinline__ void wait_free(int i) { mbar_wait(smem_addr(&empty[slot(i)]), parity(i) ^ 1u); }
  __device__ __forceinline__ std::uint32_t announce(int i, std::uint32_t bytes) {
    const std::uint32_t bar = smem_addr(&full[slot(i)]);
    mbar_arrive_expect_tx(bar, bytes);
    return bar;
  }

  // Consumer: waits until fill i has landed.
  __device__ __forceinline__ void wait(int i) { mbar_wait(smem_addr(&full[slot(i)]), parity(i)); }

  // Consumer warp: done reading fill i (one arrival per warp; call from every lane).
  __device__ __forceinline__ void release(int i) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(smem_addr(&empty[slot(i)]));
  }
};

}  // namespace pasa::cuda
