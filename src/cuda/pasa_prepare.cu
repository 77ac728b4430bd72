// PASA's pre-processing (Algorithm 1, step 1) as a small prepass: for each block of s2 keys,
// K'_j = M K_j with M = (I - beta/n J) alpha stored in fp16 (diagonal a', off-diagonal -b', n the
// block's key count), written in fp16. Each row of M K is a' k_r - b' sum_{t != r} k_t, i.e.
// (a' + b') k_r - b' colsum: one column sum per block in fp32, then one fused multiply-add per
// element rounded once to fp16 (the emulator forms the same GEMM in fp32 term by term).
// bf16 inputs are rounded to fp16 first (the pasa policy's input format), and V is copied to fp16.
//
// One CTA of 128 threads per (key block, K/V head, batch); each thread owns 8 consecutive head-dim
// columns (16-byte loads) of every kRowLanes-th row.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/kernel_params.h"
#include "cuda/ptx.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

constexpr int kPrepThreads = 128;

// Eight 16-bit elements (16 bytes) as floats rounded to fp16.
template <typename InElem>
__device__ __forceinline__ void load8_as_fp16(const InElem* src, float (&x)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const InElem* e = reinterpret_cast<const InElem*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (std::is_same_v<InElem, __half>) {
      x[i] = __half2float(e[i]);
    } else {
      x[i] = round_fp16(__bfloat162float(e[i]));
    }
  }
}

__device__ __forceinline__ void store8_fp16(__half* dst, const float (&x)[8]) {
  uint4 raw;
  __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(x[2 * i], x[2 * i + 1]);
  *reinterpret_cast<uint4*>(dst) = raw;
}

template <int kHeadDim, typename InElem>
__global__ void __launch_bounds__(kPrepThreads) pasa_prepare_kernel(const __grid_constant__ PasaPrepareParams p) {
  constexpr int kGroups = kHeadDim / 8;                 // 16-byte column groups per row
  constexpr int kRowLanes = kPrepThreads / kGroups;     // threads sharing one column group
  __shared__ float partial[kRowLanes][kHeadDim];
  __shared__ float colsum[kHeadDim];

  const int kb = static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int k0 = kb * p.block_kv;
  const int n = min(p.block_kv, p.seq_kv - k0);
  const bool last = k0 + p.block_kv >= p.seq_kv;
  const float diag = last ? p.diag_last : p.diag_full;
  const float off = last ? p.off_last : p.off_full;
  const int cg = static_cast<int>(threadIdx.x) % kGroups;
  const int lane_row = static_cast<int>(threadIdx.x) / kGroups;
  const int col = cg * 8;

  const InElem* gK = static_cast<const InElem*>(p.k.data) + b * p.k.stride_b + h * p.k.stride_h + col;
  const InElem* gV = static_cast<const InElem*>(p.v.data) + b * p.v.stride_b + h * p.v.stride_h + col;
  const std::int64_t out_base = ((static_cast<std::int64_t>(b) * p.heads_kv + h) * p.seq_kv) * kHeadDim + col;
  __half* oK = static_cast<__half*>(p.k_out) + out_base;
  __half* oV = static_cast<__half*>(p.v_out) + out_base;

  float sum[8] = {};
  for (int r = lane_row; r < n; r += kRowLanes) {
    float x[8];
    load8_as_fp16(gK + (k0 + r) * p.k.stride_s, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum[i] += x[i];
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) partial[lane_row][col + i] = sum[i];
  __syncthreads();
  if (threadIdx.x < kHeadDim) {
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowLanes; ++r) s += partial[r][threadIdx.x];
    colsum[threadIdx.x] = s;
  }
  __syncthreads();

  const float a = diag - off;  // a' + b': exact in fp32 for fp16 a', b'
  float shift[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) shift[i] = off * colsum[col + i];
  for (int r = lane_row; r < n; r += kRowLanes) {
    float x[8];
    load8_as_fp16(gK + (k0 + r) * p.k.stride_s, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = fmaf(a, x[i], shift[i]);
    store8_fp16(oK + static_cast<std::int64_t>(k0 + r) * kHeadDim, x);
    if constexpr (std::is_same_v<InElem, __nv_bfloat16>) {
      load8_as_fp16(gV + (k0 + r) * p.v.stride_s, x);
      store8_fp16(oV + static_cast<std::int64_t>(k0 + r) * kHeadDim, x);
    }
  }
}

template <int kHeadDim, typename InElem>
void launch_prepare(const PasaPrepareParams& p, int batch, cudaStream_t stream) {
  const dim3 grid((p.seq_kv + p.block_kv - 1) / p.block_kv, p.heads_kv, batch);
  pasa_prepare_kernel<kHeadDim, InElem><<<grid, kPrepThreads, 0, stream>>>(p);
  check_launch("pasa_prepare_kernel launch");
}

}  // namespace

void launch_pasa_prepare(const PasaPrepareParams& p, int batch, int head_dim, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const bool bf16 = p.in_type == ElemType::bf16;
  if (p.in_type != ElemType::f16 && !bf16) throw Error("pasa prepass: k/v must be f16 or bf16");
  if (head_dim == 64) {
    bf16 ? launch_prepare<64, __nv_bfloat16>(p, batch, s) : launch_prepare<64, __half>(p, batch, s);
  } else if (head_dim == 128) {
    bf16 ? launch_prepare<128, __nv_bfloat16>(p, batch, s) : launch_prepare<128, __half>(p, batch, s);
  } else {
    throw Error("pasa prepass: head dim must be 64 or 128");
  }
}

}  // namespace pasa::cuda
