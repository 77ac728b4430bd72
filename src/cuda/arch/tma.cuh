// SPDX-License-Identifier: Apache-2.0
// The device side of tma.h: one thread copies a box of a tensor map into shared memory, or back.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace pasa::cuda {

// The box at coordinates (channel c0, row c1, head c2, batch c3) of `map` (a __grid_constant__
// kernel parameter) into shared address `dst` (1024-byte aligned for the 128-byte swizzle); its bytes
// count against barrier `bar`'s announced transaction bytes. Rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// The reverse: shared address `src` (laid out as tma_load_4d leaves a box) into the box at (c0, c1,
// c2, c3) of `map`; rows past the tensor's end are not written. Completes asynchronously, as a member
// of the issuing thread's bulk async-group (commit with bulk_commit_group).
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3, std::uint32_t src) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}

__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Until the issuing thread's committed bulk stores have read their shared memory (it may be written
// again), or with kWrites until they have also written global memory.
template <bool kWrites = false>
__device__ __forceinline__ void bulk_wait_group_all() {
  if constexpr (kWrites) {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}

}  // namespace pasa::cuda
