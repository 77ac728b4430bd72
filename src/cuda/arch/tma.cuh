// SPDX-License-Identifier: Apache-2.0
// The device side of tma.h: one thread copies a box of a tensor map into shared memory.
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

}  // namespace pasa::cuda
