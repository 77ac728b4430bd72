// SPDX-License-Identifier: Apache-2.0
// Ping-pong scheduling of the consumer warpgroups (FlashAttention-3, section 3.1): the warpgroups
// take turns to issue their GEMMs, round robin, so that while one warpgroup's GEMMs run on the
// tensor cores another computes its softmax. Named barrier kFirstId + c is warpgroup c's turn: it
// completes when warpgroup c waits on it and the warpgroup before c (which has just issued its
// GEMMs) arrives on it, 256 threads in all. The last warpgroup arrives on the first one's barrier at
// the start, so that warpgroup 0 goes first. Every warpgroup must take the same number of turns (the
// consumers of a CTA share its tiles and key blocks).
#pragma once

#include "cuda/arch/warpgroup.cuh"

namespace pasa::cuda {

template <int kGroups>
struct WarpgroupTurns {
  static constexpr int kFirstId = 1;  // barrier 0 is __syncthreads'
  int me;                             // this consumer warpgroup, 0 .. kGroups - 1

  __device__ __forceinline__ void start() const {
    if (kGroups > 1 && me == kGroups - 1) named_barrier_arrive(kFirstId, 256);
  }
  __device__ __forceinline__ void wait() const {
    if (kGroups > 1) named_barrier_sync(kFirstId + me, 256);
  }
  __device__ __forceinline__ void pass() const {
    if (kGroups > 1) named_barrier_arrive(kFirstId + (me + 1) % kGroups, 256);
  }
};

}  // namespace pasa::cuda
