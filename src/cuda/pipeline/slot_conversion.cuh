// SPDX-License-Identifier: Apache-2.0
// A second completion for the slots of a TileRing whose fills other warps convert in place before the
// consumers read them (the pasa variant's bf16 V, rounded to fp16 by the producer warpgroup's spare
// warps). Per slot one more mbarrier, `converted`, which the converting warps complete (one arrival
// each) after the fill has landed (the ring's `full`) and they have rewritten it; consumers wait on it
// instead of `full`, in the same phases. The converters learn that the producer has issued its last
// fill from an empty fill it announces at the end, with its number in `last`.
#pragma once

#include <cstdint>

#include "cuda/arch/mbarrier.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/pipeline/tile_ring.cuh"

namespace pasa::cuda {

template <int kStages>
struct SlotConversion {
  std::uint64_t converted[kStages];
  int last;  // the producer's end-of-fills marker (-1 until it has issued its last fill)

  // One thread, before the CTA-wide barrier that publishes it: `converters` warps convert each fill.
  __device__ __forceinline__ void init(int converters) {
    for (int s = 0; s < kStages; ++s) mbar_init(smem_addr(&converted[s]), converters);
    last = -1;
  }

  // Producer, after its last fill (`fills` of them): an empty fill that tells the converters to stop.
  __device__ __forceinline__ void end(TileRing<kStages>& ring, int fills) {
    ring.wait_free(fills);
    last = fills;
    ring.announce(fills, 0);  // (the arrival's release publishes `last`)
  }

  // Converting warp: waits for fill i to land; false where it is the producer's end marker.
  __device__ __forceinline__ bool wait_fill(TileRing<kStages>& ring, int i) {
    ring.wait(i);
    return *static_cast<volatile int*>(&last) != i;
  }
  // Converting warp: its part of fill i is rewritten (one arrival per warp; call from every lane).
  __device__ __forceinline__ void converted_by_warp(int i) {
    fence_proxy_async_shared();  // (the consumers read the slot with wgmma: the async proxy)
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(smem_addr(&converted[TileRing<kStages>::slot(i)]));
  }

  // Consumer: waits until fill i has landed and been converted.
  __device__ __forceinline__ void wait(int i) {
    mbar_wait(smem_addr(&converted[TileRing<kStages>::slot(i)]), TileRing<kStages>::parity(i));
  }
};

}  // namespace pasa::cuda
