// SPDX-License-Identifier: Apache-2.0
// The forward kernels' epilogue: O = O~ / l and the LSE, out to global memory in the output's dtype
// (f32, f16 or bf16). Rows past the sequence end are not written.
//
// Two ways out: direct (each thread stores its pairs from the mma C layout: 4 or 8 bytes a store,
// eight rows a warp store) and staged (16-bit outputs: the warp writes its rows into its own rows of
// the Q tile in shared memory, which only it ever read, then stores whole rows in 16-byte pieces,
// coalesced). f32 outputs always go direct (their rows are twice the Q tile's).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/host/kernel_params.h"
#include "cuda/arch/ptx.cuh"

namespace pasa::cuda {

// How an epilogue takes a value of O to the output type.
enum class OutRounding {
  direct,    // rounded once, to the output type
  // rounded to fp16 first (pasa: O is an fp16 value), a finite value past fp16's range saturated at
  // its largest (O~ / l can pass V's largest magnitude by its error, where exact attention's O, a
  // convex combination of V, cannot; the emulator saturates alike)
  via_fp16,
  // rounded once, and saturated at a 16-bit output type's largest finite value, NaN kept (a quantized
  // V: its values, and so their convex combination O, can pass V's largest magnitude by the
  // quantization error, where exact attention's cannot, and rounding would give inf; the emulator
  // saturates alike)
  saturate,
};

// The columns' factors of an output without any (store_rows' default).
struct UnitColumns {};

// x / l as x inv, then times the columns' factors scale(n8) (none for UnitColumns).
template <class Scale>
__device__ __forceinline__ float2 scaled(float2 x, float inv, const Scale& scale, int n8) {
  if constexpr (std::is_same_v<Scale, UnitColumns>) {
    return make_float2(x.x * inv, x.y * inv);
  } else {
    const float2 s = scale(n8);
    return make_float2(x.x * inv * s.x, x.y * inv * s.y);
  }
}

// Two values of O as one 16-bit pair of the output type, saturated where `saturate`
// (OutRounding::saturate).
template <typename Elem>
__device__ __forceinline__ std::uint32_t pack_output(float lo, float hi, bool saturate) {
  return saturate ? pack2_satfinite<Elem>(lo, hi) : pack2<Elem>(lo, hi);
}

__device__ __forceinline__ float output_value(float x, OutRounding rounding) {
  return rounding == OutRounding::via_fp16 ? round_fp16_satfinite(x) : x;
}

// Two adjacent elements of one output row (the pointer is aligned to two elements); `saturate`: as
// OutRounding::saturate says.
__device__ __forceinline__ void store_pair(void* row, ElemType type, int col, float a, float b, bool saturate = false) {
  switch (type) {
    case ElemType::f32:
      *reinterpret_cast<float2*>(static_cast<float*>(row) + col) = make_float2(a, b);
      break;
    case ElemType::f16:
      *reinterpret_cast<std::uint32_t*>(static_cast<__half*>(row) + col) = pack_output<__half>(a, b, saturate);
      break;
    case ElemType::bf16:
      *reinterpret_cast<std::uint32_t*>(static_cast<__nv_bfloat16*>(row) + col) =
          pack_output<__nv_bfloat16>(a, b, saturate);
      break;
  }
}

__device__ __forceinline__ void store_lse(const FwdParams& p, int b, int h, int row, float lse) {
  if (p.lse != nullptr && row < p.seq_q && threadIdx.x % 4 == 0) {
    p.lse[b * p.lse_stride_b + h * p.lse_stride_h + static_cast<std::int64_t>(row) * p.lse_stride_s] = lse;
  }
}

__device__ __forceinline__ char* output_row(const FwdParams& p, int b, int h, int row) {
  const std::int64_t elem = p.o_type == ElemType::f32 ? 4 : 2;
  const std::int64_t offset =
      b * p.o_stride_b + h * p.o_stride_h + static_cast<std::int64_t>(row) * p.o_stride_s;
  return static_cast<char*>(p.o) + offset * elem;
}

// Direct: writes row `row` (global query index) of head (b, h) and its LSE. o_row holds kDTiles
// pairs, the pair of tile n at head-dim columns 8n + 2t, 8n + 2t + 1.
template <int kDTiles>
__device__ __forceinline__ void store_output_row(const FwdParams& p, int b, int h, int row,
                                                 const float (&o_row)[kDTiles][2], float lse) {
  store_lse(p, b, h, row, lse);
  if (row >= p.seq_q) return;
  const int t = static_cast<int>(threadIdx.x) % 4;
  void* out_row = output_row(p, b, h, row);
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) store_pair(out_row, p.o_type, 8 * n + 2 * t, o_row[n][0], o_row[n][1]);
}

// Staged: one warp's kRows x kHeadDim output tile through its own rows of shared memory (row stride
// kStride elements of 2 bytes). put() each pair, then flush() once.
template <int kRows, int kHeadDim, int kStride>
struct StagedOutput {
  char* smem;  // the warp's first row

  // The pair at (row r of the warp's tile, columns col, col + 1), converted to the output type (f16
  // or bf16). Conflict-free: the eight rows of a store start 4 banks apart, the quad covers 4 banks.
  __device__ __forceinline__ void put(ElemType type, int r, int col, float a, float b) const {
    char* dst = smem + (r * kStride + col) * 2;
    if (type == ElemType::f16) {
      *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
    } else {
      *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
    }
  }

  // Rows [row0, row0 + kRows) of head (b, h), 16 bytes per lane per store, rows past seq_q skipped.
  __device__ __forceinline__ void flush(const FwdParams& p, int b, int h, int row0) const {
    constexpr int kChunksPerRow = kHeadDim * 2 / 16;
    constexpr int kChunks = kRows * kChunksPerRow;
    static_assert(kChunks % 32 == 0, "the warp's tile must split evenly over its lanes");
    __syncwarp();
    const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
    for (int k = 0; k < kChunks / 32; ++k) {
      const int chunk = k * 32 + lane;
      const int r = chunk / kChunksPerRow, c = chunk % kChunksPerRow;
      if (row0 + r < p.seq_q) {
        const uint4 v = *reinterpret_cast<const uint4*>(smem + r * kStride * 2 + c * 16);
        *reinterpret_cast<uint4*>(output_row(p, b, h, row0 + r) + c * 16) = v;
      }
    }
  }
};

}  // namespace pasa::cuda
