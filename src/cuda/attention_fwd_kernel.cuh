// The forward attention kernel (FlashAttention-2 structure on mma.sync m16n8k16), composed from the
// pieces beside it: tile_load (cp.async with zero fill), online_softmax (the exact / PASA row step),
// epilogue (O and LSE stores).
//
// One CTA = kWarps warps (kFwdWarps = 4) = one block of 16 * kWarps query rows of one (batch, head);
// each warp owns 16 rows and keeps its Q fragments in registers. Key blocks of kBlockN rows are
// visited in ascending order (PASA's pseudo-average depends on the order); K_j and V_j each have one
// shared-memory buffer: V_j loads while Q K_j^T runs, K_{j+1} while P V_j runs. Causal CTAs are
// launched longest first.
//
// v1 (this file): correctness first; mma.sync rather than wgmma, one K and one V buffer, direct
// (uncoalesced) O stores. On an H200 (2026-11-22) exact runs at 215-278 TFLOP/s, about 0.8x torch's
// FlashAttention-2 backend and 0.45x its cuDNN backend; the pasa kernel at 0.6-0.7x exact (fp16
// rounding points, the K' prepass, 52 bytes of spills at head dim 128). Next: wgmma + TMA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/epilogue.cuh"
#include "cuda/kernel_params.h"
#include "cuda/online_softmax.cuh"
#include "cuda/ptx.cuh"
#include "cuda/tile_load.cuh"

namespace pasa::cuda {

// A CTA of kWarps warps owns kWarps * 16 query rows (each warp 16 rows).
template <int kWarps>
constexpr int block_m() {
  return 16 * kWarps;
}

template <int kHeadDim, int kBlockN, int kWarps>
constexpr int fwd_smem_bytes() {
  return (block_m<kWarps>() + 2 * kBlockN) * smem_row_stride<kHeadDim>() * 2;
}

// Scores of keys a row may not see become -inf: keys past the sequence end, and (causal) keys after
// the row's last visible key.
template <int kNTiles>
__device__ __forceinline__ void apply_mask(float (&s)[kNTiles][4], const FwdParams& p, int n0, int row_lo) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    int limit = p.seq_kv;  // visible keys are those < limit
    if (p.causal) limit = min(limit, row_lo + 8 * i + p.causal_offset + 1);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (n0 + 8 * n + 2 * t + e >= limit) s[n][2 * i + e] = -INFINITY;
      }
    }
  }
}

// acc += P V over the output tiles [col0 / 8, col0 / 8 + kTiles) of a kNChunks * 16-key block; V is
// row-major [key][D] in shared memory, read transposed by ldmatrix as the B operand.
template <int kTiles, int kNChunks, int kStride, typename MmaElem>
__device__ __forceinline__ void mma_pv(float (&acc)[kTiles][4], const std::uint32_t (&tOrP)[kNChunks][4],
                                       const MmaElem* sV, int col0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kNChunks; ++kk) {
#pragma unroll
    for (int n = 0; n < kTiles; n += 2) {
      std::uint32_t r[4];
      const int key = kk * 16 + ((lane / 8) % 2) * 8 + lane % 8;
      const int c = col0 + n * 8 + (lane / 16) * 8;
      ldmatrix_x4_trans(r, smem_addr(sV + key * kStride + c));
      mma_16816<MmaElem>(acc[n], tOrP[kk], r[0], r[1]);
      mma_16816<MmaElem>(acc[n + 1], tOrP[kk], r[2], r[3]);
    }
  }
}

template <int kHeadDim, int kBlockN, typename QElem, bool kPasa, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) attention_fwd_kernel(const __grid_constant__ FwdParams p) {
  constexpr int kBlockM = block_m<kWarps>();
  constexpr int kThreads = 32 * kWarps;
  // PASA's K' and V are fp16 (the prepass wrote them); exact reads K and V as given.
  using KVElem = std::conditional_t<kPasa, __half, QElem>;
  using MmaElem = KVElem;
  constexpr int kStride = smem_row_stride<kHeadDim>();
  constexpr int kNTiles = kBlockN / 8;     // n8 score tiles per row block
  constexpr int kDTiles = kHeadDim / 8;    // n8 output tiles
  constexpr int kDChunks = kHeadDim / 16;  // k16 steps of Q K^T
  constexpr int kNChunks = kBlockN / 16;   // k16 steps of P V
  static_assert(kNTiles % 2 == 0 && kDTiles % 2 == 0, "ldmatrix.x4 loads two n8 tiles at a time");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  QElem* sQ = reinterpret_cast<QElem*>(smem_raw);                  // [kBlockM][kStride]
  KVElem* sK = reinterpret_cast<KVElem*>(sQ + kBlockM * kStride);  // [kBlockN][kStride]
  KVElem* sV = sK + kBlockN * kStride;                             // [kBlockN][kStride]

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int m_block = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int h_kv = h / p.group;
  const int m0 = m_block * kBlockM;
  const int row_lo = m0 + warp * 16 + lane / 4;  // this thread's rows: row_lo and row_lo + 8

  // Keys [0, n_end) are visible to at least one row of the block.
  int n_end = p.seq_kv;
  if (p.causal) {
    const int last_row = min(m0 + kBlockM, p.seq_q) - 1;
    n_end = max(0, min(p.seq_kv, last_row + p.causal_offset + 1));
  }
  if (n_end == 0) {  // every row fully masked: O = 0, LSE = -inf
    const float zero[kDTiles][2] = {};
    store_output_row(p, b, h, row_lo, zero, -INFINITY);
    store_output_row(p, b, h, row_lo + 8, zero, -INFINITY);
    return;
  }
  const int n_blocks = (n_end + kBlockN - 1) / kBlockN;

  const QElem* gQ = static_cast<const QElem*>(p.q.data) + b * p.q.stride_b + h * p.q.stride_h +
                    m0 * p.q.stride_s;  // [kBlockM, D] tile
  const KVElem* gK = static_cast<const KVElem*>(p.k.data) + b * p.k.stride_b + h_kv * p.k.stride_h;
  const KVElem* gV = static_cast<const KVElem*>(p.v.data) + b * p.v.stride_b + h_kv * p.v.stride_h;

  load_tile_async<kBlockM, kHeadDim, kThreads>(sQ, gQ, p.q.stride_s, p.seq_q - m0);
  cp_async_commit();
  load_tile_async<kBlockN, kHeadDim, kThreads>(sK, gK, p.k.stride_s, p.seq_kv);
  cp_async_commit();
  cp_async_wait<1>();  // Q has landed
  __syncthreads();

  if constexpr (kPasa && std::is_same_v<QElem, __nv_bfloat16>) {
    // The pasa policy's input format is fp16: bf16 queries are rounded to it, in place.
    constexpr int kPairs = kBlockM * kHeadDim / 2;
    for (int i = static_cast<int>(threadIdx.x); i < kPairs; i += kThreads) {
      const int r = i / (kHeadDim / 2), c = 2 * (i % (kHeadDim / 2));
      auto* pair = reinterpret_cast<__nv_bfloat162*>(sQ + r * kStride + c);
      const __half2 hv = __float22half2_rn(__bfloat1622float2(*pair));
      *reinterpret_cast<__half2*>(pair) = hv;
    }
    __syncthreads();
  }
  // This warp's 16 x D slice of Q as A fragments: held in registers, except for the pasa kernel at
  // head dim 128, which re-reads them from shared memory each key block (registers are short there).
  constexpr bool kQInRegs = !(kPasa && kHeadDim == 128);
  std::uint32_t tSrQ[kQInRegs ? kDChunks : 1][4];
  const auto load_q_fragment = [&](std::uint32_t (&frag)[4], int kk) {
    const int r = warp * 16 + lane % 8 + ((lane / 8) % 2) * 8;
    const int c = kk * 16 + (lane / 16) * 8;
    ldmatrix_x4(frag, smem_addr(sQ + r * kStride + c));
  };
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < kDChunks; ++kk) load_q_fragment(tSrQ[kk], kk);
  }

  using Softmax = std::conditional_t<kPasa, PasaSoftmax, ExactSoftmax>;
  Softmax softmax;
  softmax.init();
  float tOrO[kPasa ? 1 : kDTiles][4];     // exact: running O~ in fp32
  __half2 tOrAcc[kPasa ? kDTiles : 1][2];  // pasa: running O~ in fp16 (rows lo, hi)
#pragma unroll
  for (int n = 0; n < (kPasa ? 1 : kDTiles); ++n) tOrO[n][0] = tOrO[n][1] = tOrO[n][2] = tOrO[n][3] = 0.0f;
#pragma unroll
  for (int n = 0; n < (kPasa ? kDTiles : 1); ++n) tOrAcc[n][0] = tOrAcc[n][1] = __float2half2_rn(0.0f);

  for (int j = 0; j < n_blocks; ++j) {
    const int n0 = j * kBlockN;
    cp_async_wait<0>();  // K_j has landed
    __syncthreads();     // ... for every thread; and every warp is done reading V_{j-1}
    load_tile_async<kBlockN, kHeadDim, kThreads>(sV, gV + n0 * p.v.stride_s, p.v.stride_s, p.seq_kv - n0);
    cp_async_commit();

    // S = Q K_j^T
    float tSrS[kNTiles][4];
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) tSrS[n][0] = tSrS[n][1] = tSrS[n][2] = tSrS[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDChunks; ++kk) {
      std::uint32_t q_reloaded[4];
      if constexpr (!kQInRegs) load_q_fragment(q_reloaded, kk);
      const std::uint32_t(&q_frag)[4] = kQInRegs ? tSrQ[kQInRegs ? kk : 0] : q_reloaded;
#pragma unroll
      for (int n = 0; n < kNTiles; n += 2) {
        std::uint32_t r[4];
        const int key = n * 8 + (lane / 16) * 8 + lane % 8;
        const int c = kk * 16 + ((lane / 8) % 2) * 8;
        ldmatrix_x4(r, smem_addr(sK + key * kStride + c));
        mma_16816<MmaElem>(tSrS[n], q_frag, r[0], r[1]);
        mma_16816<MmaElem>(tSrS[n + 1], q_frag, r[2], r[3]);
      }
    }

    const bool needs_mask =
        n0 + kBlockN > p.seq_kv || (p.causal && n0 + kBlockN - 1 > m0 + p.causal_offset);
    float ep[2], ec[2];  // rescale factors of the running O~ and of this block's P V
    if constexpr (kPasa) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int x = 0; x < 4; ++x) tSrS[n][x] = round_fp16(tSrS[n][x]);  // S' leaves the GEMM in fp16
      }
      float mean[2];
      PasaSoftmax::block_mean(tSrS, min(kBlockN, p.seq_kv - n0), mean);
      if (needs_mask) apply_mask(tSrS, p, n0, row_lo);
      softmax.step(tSrS, mean, p.pasa_g, ep, ec);
    } else {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int x = 0; x < 4; ++x) tSrS[n][x] *= p.scale_log2;
      }
      if (needs_mask) apply_mask(tSrS, p, n0, row_lo);
      softmax.step(tSrS, ep);
    }

    // P as A fragments of the P V mma (rounded to the operand type).
    std::uint32_t tOrP[kNChunks][4];
#pragma unroll
    for (int kk = 0; kk < kNChunks; ++kk) {
      tOrP[kk][0] = pack2<MmaElem>(tSrS[2 * kk][0], tSrS[2 * kk][1]);
      tOrP[kk][1] = pack2<MmaElem>(tSrS[2 * kk][2], tSrS[2 * kk][3]);
      tOrP[kk][2] = pack2<MmaElem>(tSrS[2 * kk + 1][0], tSrS[2 * kk + 1][1]);
      tOrP[kk][3] = pack2<MmaElem>(tSrS[2 * kk + 1][2], tSrS[2 * kk + 1][3]);
    }

    cp_async_wait<0>();  // V_j has landed
    __syncthreads();     // ... for every thread; and every warp is done reading K_j
    if (j + 1 < n_blocks) {
      const int n1 = n0 + kBlockN;
      load_tile_async<kBlockN, kHeadDim, kThreads>(sK, gK + n1 * p.k.stride_s, p.k.stride_s, p.seq_kv - n1);
      cp_async_commit();
    }

    if constexpr (kPasa) {
      // O~ = fl(fl(ep O~) + fl(ec fl(P V_j))), all in fp16 (the pasa preset's o format). P V_j is
      // formed in parts of the head dim so that its fp32 accumulators fit beside O~ and P.
      constexpr int kSplit = kHeadDim == 128 ? 2 : 1;
      constexpr int kPart = kDTiles / kSplit;
#pragma unroll
      for (int part = 0; part < kSplit; ++part) {
        float tOrPV[kPart][4];
#pragma unroll
        for (int n = 0; n < kPart; ++n) tOrPV[n][0] = tOrPV[n][1] = tOrPV[n][2] = tOrPV[n][3] = 0.0f;
        mma_pv<kPart, kNChunks, kStride>(tOrPV, tOrP, sV, part * kPart * 8, lane);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const __half2 ep2 = __float2half2_rn(ep[i]);
          const __half2 ec2 = __float2half2_rn(ec[i]);
#pragma unroll
          for (int n = 0; n < kPart; ++n) {
            const __half2 pv = __floats2half2_rn(tOrPV[n][2 * i], tOrPV[n][2 * i + 1]);
            __half2& acc = tOrAcc[part * kPart + n][i];
            acc = __hadd2(__hmul2(ep2, acc), __hmul2(ec2, pv));
          }
        }
      }
    } else {
#pragma unroll
      for (int n = 0; n < kDTiles; ++n) {
        tOrO[n][0] *= ep[0];
        tOrO[n][1] *= ep[0];
        tOrO[n][2] *= ep[1];
        tOrO[n][3] *= ep[1];
      }
      mma_pv<kDTiles, kNChunks, kStride>(tOrO, tOrP, sV, 0, lane);  // O~ += P V_j
    }
  }

  float row_l[2], lse[2];
  if constexpr (kPasa) {
    softmax.finish(p.pasa_g, row_l, lse);
  } else {
    softmax.finish(row_l, lse);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const bool empty = softmax.m[i] == -INFINITY || row_l[i] == 0.0f;  // fully masked row
    float out[kDTiles][2];
#pragma unroll
    for (int n = 0; n < kDTiles; ++n) {
      if constexpr (kPasa) {
        const float2 acc = __half22float2(tOrAcc[n][i]);
        out[n][0] = empty ? 0.0f : round_fp16(acc.x / row_l[i]);
        out[n][1] = empty ? 0.0f : round_fp16(acc.y / row_l[i]);
      } else {
        const float inv = empty ? 0.0f : 1.0f / row_l[i];
        out[n][0] = tOrO[n][2 * i] * inv;
        out[n][1] = tOrO[n][2 * i + 1] * inv;
      }
    }
    store_output_row(p, b, h, row_lo + 8 * i, out, lse[i]);
  }
}

// Host side: one launch of an instantiation. Throws pasa::Error on a CUDA error.
template <int kHeadDim, int kBlockN, typename QElem, bool kPasa, int kWarps>
void launch_fwd(const FwdParams& p, int batch, cudaStream_t stream) {
  auto* kernel = attention_fwd_kernel<kHeadDim, kBlockN, QElem, kPasa, kWarps>;
  constexpr int kBlockM = block_m<kWarps>();
  constexpr int kThreads = 32 * kWarps;
  constexpr int smem = fwd_smem_bytes<kHeadDim, kBlockN, kWarps>();
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "cudaFuncSetAttribute(attention_fwd_kernel)");
  const dim3 grid((p.seq_q + kBlockM - 1) / kBlockM, p.heads_q, batch);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  check_launch("attention_fwd_kernel launch");
}

}  // namespace pasa::cuda
