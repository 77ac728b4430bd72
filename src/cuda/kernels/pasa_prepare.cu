// SPDX-License-Identifier: Apache-2.0
// PASA's pre-processing (Algorithm 1, step 1) as a prepass that also lays the operands out for the
// wgmma kernel (pasa_stage.cuh): for each block of s2 keys, K'_j = M K_j with M = (I - beta/s2 J)
// alpha stored in fp16 (diagonal a', off-diagonal -b'), written in fp16. A short last block of n keys
// is padded with s2 - n copies of its own mean key (rounded to fp16), as the emulator does, so that
// every block shares M and its invariance G (numerics/pasa_shift.h).
// Each row of M K is a' k_r - b' sum_{t != r} k_t, i.e. (a' + b') k_r - b' colsum: one column sum per
// block in fp32, then one fused multiply-add per element rounded once to fp16 (the emulator forms the
// same GEMM in fp32 term by term). bf16 inputs are rounded to fp16 first (the pasa policy's input
// format). Also per block: the column mean of the fp16 K' rows (the rows that give the kernel its
// sums of S'), and, for bf16 inputs to the sm_90a kernel, V rounded to fp16 (its TMA copies fp16 V as
// given; the portable kernel rounds V in shared memory instead).
//
// One CTA of kPrepThreads per (key block, K/V head, batch); thread (row lane, column group) owns 8
// consecutive channels (16-byte loads and stores) of every kRowLanes-th key (at head dim 96, 12
// column groups, the last 4 threads own none).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/arch/cuda_check.h"
#include "cuda/block/pasa_stage.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/kernels/launch_dispatch.h"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

constexpr int kPrepThreads = 256;

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

__device__ __forceinline__ uint4 pack8_fp16(const float (&x)[8]) {
  uint4 raw;
  raw.x = pack2<__half>(x[0], x[1]);
  raw.y = pack2<__half>(x[2], x[3]);
  raw.z = pack2<__half>(x[4], x[5]);
  raw.w = pack2<__half>(x[6], x[7]);
  return raw;
}

struct PrepParams {
  Operand k, v;
  int heads_kv, seq_kv, n_kb;
  float diag, off;
  float mean_key_factor;  // pseudo_avg=k: the mean rows are this (M's row sum) times the mean key;
                          // 0: they are the mean of the stored K' rows (pseudo_avg=s)
  std::uint8_t* tiles;
  __half* v_fp16;  // bf16 inputs: V in fp16, [B, H_kv, S_kv, D]; null: not written
};

template <int D, typename InElem>
__global__ void __launch_bounds__(kPrepThreads) pasa_prepare_kernel(const __grid_constant__ PrepParams p) {
  using Stage = PasaStage<D>;
  constexpr int kKeys = Stage::kKeys;
  constexpr int kGroups = D / 8;                  // 16-byte column groups per row
  constexpr int kRowLanes = kPrepThreads / kGroups;  // threads sharing one column group
  __shared__ float partial[kRowLanes][D];
  __shared__ float colsum[D];
  __shared__ float key_mean[D];  // the block's mean key over s2 rows (padding included)

  const int kb = static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int k0 = kb * kKeys;
  const int n = min(kKeys, p.seq_kv - k0);
  const float diag = p.diag, off = p.off;
  const int cg = static_cast<int>(threadIdx.x) % kGroups;
  const int lane_row = static_cast<int>(threadIdx.x) / kGroups;
  const int col = cg * 8;
  const int row_end = lane_row < kRowLanes ? kKeys : 0;  // a thread past the row lanes copies no key

  const InElem* gK = static_cast<const InElem*>(p.k.data) + b * p.k.stride_b + h * p.k.stride_h + col;
  std::uint8_t* stage = p.tiles + ((static_cast<std::int64_t>(b) * p.heads_kv + h) * p.n_kb + kb) * Stage::kBytes;

  // Column sums of the block's keys; bf16 V's rows rounded to fp16 on the way.
  float sum[8] = {};
  for (int r = lane_row; r < min(n, row_end); r += kRowLanes) {
    float x[8];
    load8_as_fp16(gK + (k0 + r) * p.k.stride_s, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum[i] += x[i];
    if constexpr (std::is_same_v<InElem, __nv_bfloat16>) {
      if (p.v_fp16 != nullptr) {
        const InElem* gV = static_cast<const InElem*>(p.v.data) + b * p.v.stride_b + h * p.v.stride_h + col;
        load8_as_fp16(gV + (k0 + r) * p.v.stride_s, x);
        *reinterpret_cast<uint4*>(p.v_fp16 + (((static_cast<std::int64_t>(b) * p.heads_kv + h) * p.seq_kv + k0 + r) * D + col)) =
            pack8_fp16(x);
      }
    }
  }
  const auto reduce = [&](float (&s)[8]) {  // the row lanes' partial sums -> colsum (ends synced)
    if (lane_row < kRowLanes) {
#pragma unroll
      for (int i = 0; i < 8; ++i) partial[lane_row][col + i] = s[i];
    }
    __syncthreads();
    if (threadIdx.x < D) {
      float total = 0.0f;
#pragma unroll
      for (int r = 0; r < kRowLanes; ++r) total += partial[r][threadIdx.x];
      colsum[threadIdx.x] = total;
    }
    __syncthreads();
  };
  reduce(sum);
  // A short block's padding key: the mean of its n keys in fp16; the column sums then cover s2 rows.
  float pad[8] = {};
  if (n < kKeys) {
#pragma unroll
    for (int i = 0; i < 8; ++i) pad[i] = round_fp16(colsum[col + i] / static_cast<float>(n));
  }
  const float n_pad = static_cast<float>(kKeys - n);
  if (threadIdx.x < D) {
    const int ch = static_cast<int>(threadIdx.x);
    const float pad_ch = n < kKeys ? round_fp16(colsum[ch] / static_cast<float>(n)) : 0.0f;
    key_mean[ch] = fmaf(n_pad, pad_ch, colsum[ch]) / kKeys;
  }

  // K' rows (zeros past the end), and the sums of their fp16 values for the mean rows. K is read a
  // second time (from L2): keeping a thread's keys in registers across the column sums was measured
  // slower (0.109 against 0.076 ms at D 64 / 4k: 112 registers a thread left too few CTAs per SM).
  const float a = diag - off;  // a' + b': exact in fp32 unless beta is within 2^-13 of 1 (exponents 13 apart)
  float shift[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) shift[i] = off * fmaf(n_pad, pad[i], colsum[col + i]);
  float ksum[8] = {};
  for (int r = lane_row; r < row_end; r += kRowLanes) {
    float x[8];
    if (r < n) {
      load8_as_fp16(gK + (k0 + r) * p.k.stride_s, x);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = pad[i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[i] = round_fp16(fmaf(a, x[i], shift[i]));
      ksum[i] += x[i];
    }
    *reinterpret_cast<uint4*>(stage + swizzled_offset<128>(Stage::k_offset(r, col))) = pack8_fp16(x);
  }
  reduce(ksum);
  if (threadIdx.x < D) {
    const int ch = static_cast<int>(threadIdx.x);
    // hi = fl(mean), lo = fl((mean - hi) 2^11): the rest scaled up to hi's magnitude, so that it stays
    // a normal fp16 number (with its 11 bits) wherever hi is one. The kernel forms
    // Q.hi + Q.lo 2^-11 = (the row's sum of S') / 128.
    const float mean = p.mean_key_factor != 0.0f ? p.mean_key_factor * key_mean[ch] : colsum[ch] / kKeys;
    const __half hi = __float2half_rn(mean);
    const __half lo = __float2half_rn((mean - __half2float(hi)) * kMeanLoScale);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      *reinterpret_cast<__half*>(stage + swizzled_offset<128>(Stage::k_offset(kKeys + r, ch))) = r % 2 ? lo : hi;
    }
  }
}

template <int D, typename InElem>
void launch_prepare(const PrepParams& p, int batch, cudaStream_t stream) {
  const dim3 grid(p.n_kb, p.heads_kv, batch);
  pasa_prepare_kernel<D, InElem><<<grid, kPrepThreads, 0, stream>>>(p);
  check_launch("pasa_prepare_kernel launch");
}

}  // namespace

std::size_t pasa_tile_bytes(int batch, int heads_kv, int n_kb, int head_dim) {
  std::size_t stage = 0;
  dispatch_head_dim<64, 96, 128, 256>(head_dim, "pasa prepass", [&]<int D>() { stage = PasaStage<D>::kBytes; });
  return static_cast<std::size_t>(batch) * heads_kv * n_kb * stage;
}

void launch_pasa_tiles(const PasaRequest& r, std::uint8_t* tiles, void* v_fp16, int n_kb, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const KernelRequest& c = r.call;
  const PrepParams p{c.fwd.k, c.fwd.v, c.heads_kv,           c.fwd.seq_kv, n_kb,
                     r.diag, r.off, r.mean_key_factor, tiles,        static_cast<__half*>(v_fp16)};
  const bool bf16 = c.in_type == ElemType::bf16;
  if (c.in_type != ElemType::f16 && !bf16) throw Error("pasa prepass: k/v must be f16 or bf16");
  dispatch_head_dim<64, 96, 128, 256>(c.head_dim, "pasa prepass", [&]<int D>() {
    bf16 ? launch_prepare<D, __nv_bfloat16>(p, c.batch, s) : launch_prepare<D, __half>(p, c.batch, s);
  });
}

}  // namespace pasa::cuda
