// The forward kernels' epilogue: O = O~ / l and the LSE, from the mma C layout straight to global
// memory in the output's dtype (f32, f16 or bf16). Rows past the sequence end are not written.
#pragma once

#include <cstdint>

#include "cuda/kernel_params.h"
#include "cuda/ptx.cuh"

namespace pasa::cuda {

// Two adjacent elements of one output row (the pointer is aligned to two elements).
__device__ __forceinline__ void store_pair(void* row, ElemType type, int col, float a, float b) {
  switch (type) {
    case ElemType::f32:
      *reinterpret_cast<float2*>(static_cast<float*>(row) + col) = make_float2(a, b);
      break;
    case ElemType::f16:
      *reinterpret_cast<__half2*>(static_cast<__half*>(row) + col) = __floats2half2_rn(a, b);
      break;
    case ElemType::bf16:
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(row) + col) =
          __floats2bfloat162_rn(a, b);
      break;
  }
}

// Writes row `row` (global query index) of head (b, h): o_row holds kDTiles pairs, the pair of tile n
// at head-dim columns 8n + 2t, 8n + 2t + 1.
template <int kDTiles>
__device__ __forceinline__ void store_output_row(const FwdParams& p, int b, int h, int row,
                                                 const float (&o_row)[kDTiles][2], float lse) {
  if (row >= p.seq_q) return;
  const int t = static_cast<int>(threadIdx.x) % 4;
  const std::size_t elem = p.o_type == ElemType::f32 ? 4 : 2;
  const std::int64_t offset = b * p.o_stride_b + h * p.o_stride_h + row * p.o_stride_s;
  void* out_row = static_cast<char*>(p.o) + offset * static_cast<std::int64_t>(elem);
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) store_pair(out_row, p.o_type, 8 * n + 2 * t, o_row[n][0], o_row[n][1]);
  if (p.lse != nullptr && t == 0) {
    p.lse[b * p.lse_stride_b + h * p.lse_stride_h + row * p.lse_stride_s] = lse;
  }
}

}  // namespace pasa::cuda
