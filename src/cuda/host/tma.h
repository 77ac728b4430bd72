// SPDX-License-Identifier: Apache-2.0
// Tensor-memory-accelerator (TMA) copies of 16-bit [B, H, S, D] operands: the host encodes a tensor
// map (the driver's cuTensorMapEncodeTiled, reached through the runtime's entry-point query so that
// nothing links against the driver library), and one thread of a CTA copies a box of rows x 64
// channels into shared memory with the 128-byte swizzle, zeros past the sequence end, completing on
// an mbarrier, or from shared memory back to the operand, rows past the end left alone (tma.cuh).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

// A map of the fp16 operand `op` of shape [batch, heads, seq, head_dim] (head-dim stride 1, other
// strides multiples of 16 bytes) whose box is `box_rows` rows of 64 channels. Throws pasa::Error
// naming `what` when the driver refuses it.
CUtensorMap fp16_row_tile_map(const Operand& op, int batch, int heads, int seq, int head_dim, int box_rows,
                              const char* what);

// Whether fp16_row_tile_map can map the 16-bit operand `op`: its address and strides multiples of
// 16 bytes, the strides below 2^40 bytes.
inline bool row_tile_mappable(const Operand& op) {
  const std::int64_t strides[3] = {op.stride_b, op.stride_h, op.stride_s};
  for (std::int64_t s : strides) {
    if (s < 0 || (s * 2) % 16 != 0 || s * 2 >= (std::int64_t{1} << 40)) return false;
  }
  return reinterpret_cast<std::uintptr_t>(op.data) % 16 == 0;
}

}  // namespace pasa::cuda
