// The forward attention kernel (FlashAttention-2 structure on mma.sync m16n8k16), composed from the
// pieces beside it: fwd_tiles (the CTA shape), tile_load (cp.async with zero fill), warp_mma (the
// warp's Q K^T, P V and row sums), online_softmax (the exact / PASA row step), epilogue (O and LSE).
//
// One CTA = kWarps warps = one block of kBlockM = 16 kMTiles kWarps query rows of one (batch, head);
// each warp owns 16 kMTiles rows and reads its Q fragments from shared memory each k step (one m-tile
// per warp keeps them in registers instead). Key blocks of kBlockN rows are visited in ascending
// order (PASA's pseudo-average depends on the order). With two stages, K_j+1 and V_j+1 load into the
// other buffers while block j computes (one barrier per block); with one, V_j loads under Q K_j^T and
// K_j+1 under P V_j (two barriers per block). Causal CTAs are launched longest first.
//
// v1: 1 m-tile per warp, one stage, direct O stores: exact at 215-278 TFLOP/s on an H200
//   (2026-11-22), 0.8x torch's FlashAttention-2 backend; pasa at 0.6-0.7x exact.
// v2 (this file): 2 m-tiles per warp (each K / V fragment read feeds two MMAs: +26%), tile loads
//   whose addressing stays out of the mainloop's registers, the exact scale folded into the
//   exponent's FFMA, O's rescale skipped for warps whose row maxima all stayed; pasa's softmax in
//   packed fp16 with row sums on the tensor cores and its per-row state update once per row (not
//   per quad lane). Two stages and O staged through shared memory are supported and chosen per
//   shape by fwd_tiles.h (measured: one stage everywhere). Exact 294-346 TFLOP/s at S >= 4k,
//   0.97-1.09x FA2; the pasa kernel at 0.87-0.99x exact. ncu: HMMA pipe 46-56% busy, issue slots
//   35-42%, stalls mostly fixed-latency waits with 2 warps per scheduler: the mma.sync /
//   255-register ceiling. bench/NOTES.md has the numbers. Next: wgmma + TMA with warp
//   specialization (the tile table and the split into mainloop / softmax / epilogue pieces are
//   meant to carry over).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/epilogue.cuh"
#include "cuda/fwd_tiles.h"
#include "cuda/kernel_params.h"
#include "cuda/online_softmax.cuh"
#include "cuda/ptx.cuh"
#include "cuda/tile_load.cuh"
#include "cuda/warp_mma.cuh"

namespace pasa::cuda {

// The tile of an instantiation, as a type (C++17 has no class-type template parameters).
template <int kHeadDim, bool kPasa, int kVariant = 0>
struct FwdTileOf {
  static constexpr FwdTile value =
      variant_tile(kPasa ? pasa_tile(kHeadDim) : exact_tile(kHeadDim), static_cast<FwdVariant>(kVariant));
};

// Keys a row may not see: past the sequence end, and (causal) after the row's last visible key.
__device__ __forceinline__ int visible_limit(const FwdParams& p, int row) {
  return p.causal ? min(p.seq_kv, row + p.causal_offset + 1) : p.seq_kv;
}

// exact: scores of keys a row may not see become -inf.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void apply_mask(float (&s)[kMTiles][kNTiles][4], const FwdParams& p, int n0,
                                           int row_lo) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int limit = visible_limit(p, row_lo + 16 * mt + 8 * i);
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (n0 + 8 * n + 2 * t + e >= limit) s[mt][n][2 * i + e] = -INFINITY;
        }
      }
    }
  }
}

// pasa: the same on fp16 pairs in the A-fragment layout (tile n, row i: s[mt][n / 2][2 (n % 2) + i]).
template <int kMTiles, int kNChunks>
__device__ __forceinline__ void apply_mask(std::uint32_t (&s)[kMTiles][kNChunks][4], const FwdParams& p,
                                           int n0, int row_lo) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int limit = visible_limit(p, row_lo + 16 * mt + 8 * i);
#pragma unroll
      for (int n = 0; n < 2 * kNChunks; ++n) {
        std::uint32_t& w = s[mt][n / 2][2 * (n % 2) + i];
        const int key = n0 + 8 * n + 2 * t;
        if (key >= limit) w = (w & 0xFFFF0000u) | 0x0000FC00u;      // -inf in the low half
        if (key + 1 >= limit) w = (w & 0x0000FFFFu) | 0xFC000000u;  // ... and the high half
      }
    }
  }
}

template <class TileOf, typename QElem, bool kPasa>
__global__ void __launch_bounds__(TileOf::value.threads(), TileOf::value.min_ctas_per_sm())
    attention_fwd_kernel(const __grid_constant__ FwdParams p) {
  constexpr FwdTile kT = TileOf::value;
  constexpr int kHeadDim = kT.head_dim;
  constexpr int kBlockN = kT.block_n;
  constexpr int kMTiles = kT.m_tiles;
  constexpr int kStages = kT.stages;
  constexpr int kBlockM = kT.block_m();
  constexpr int kThreads = kT.threads();
  constexpr int kStride = kT.smem_stride();
  constexpr int kNTiles = kBlockN / 8;     // n8 score tiles per row block
  constexpr int kDTiles = kHeadDim / 8;    // n8 output tiles
  constexpr int kDChunks = kHeadDim / 16;  // k16 steps of Q K^T
  constexpr int kNChunks = kBlockN / 16;   // k16 steps of P V
  constexpr int kRows = 2 * kMTiles;       // rows per thread
  constexpr std::uint32_t kTileBytes = kBlockN * kStride * 2;
  static_assert(kStride == smem_row_stride<kHeadDim>(), "tile_load and the tile table agree on padding");
  static_assert(kStages == 1 || kStages == 2, "one or two K / V stages");
  // Exact keeps Q in registers where a warp has one m-tile (the v1 shape); pasa never does.
  constexpr bool kQInRegs = !kPasa && kMTiles == 1;
  // PASA's K' and V are fp16 (the prepass wrote them); exact reads K and V as given.
  using KVElem = std::conditional_t<kPasa, __half, QElem>;
  using MmaElem = KVElem;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  QElem* sQ = reinterpret_cast<QElem*>(smem_raw);                  // [kBlockM][kStride]
  KVElem* sK = reinterpret_cast<KVElem*>(sQ + kBlockM * kStride);  // [kStages][kBlockN][kStride]
  KVElem* sV = sK + kStages * kBlockN * kStride;                   // [kStages][kBlockN][kStride]

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int m_block = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int h_kv = h / p.group;
  const int m0 = m_block * kBlockM;
  const int warp_row0 = warp * 16 * kMTiles;     // the warp's first row in the CTA's tile
  const int row_lo = m0 + warp_row0 + lane / 4;  // this thread's rows: row_lo + 16 mt + 8 i

  // Keys [0, n_end) are visible to at least one row of the block.
  int n_end = p.seq_kv;
  if (p.causal) {
    const int last_row = min(m0 + kBlockM, p.seq_q) - 1;
    n_end = max(0, min(p.seq_kv, last_row + p.causal_offset + 1));
  }
  if (n_end == 0) {  // every row fully masked: O = 0, LSE = -inf
    const float zero[kDTiles][2] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r) store_output_row(p, b, h, row_lo + 8 * r, zero, -INFINITY);
    return;
  }
  const int n_blocks = (n_end + kBlockN - 1) / kBlockN;

  const QElem* gQ = static_cast<const QElem*>(p.q.data) + b * p.q.stride_b + h * p.q.stride_h +
                    m0 * p.q.stride_s;  // [kBlockM, D] tile
  const KVElem* gK = static_cast<const KVElem*>(p.k.data) + b * p.k.stride_b + h_kv * p.k.stride_h;
  const KVElem* gV = static_cast<const KVElem*>(p.v.data) + b * p.v.stride_b + h_kv * p.v.stride_h;
  const auto load_k = [&](int j, int stage) {
    const int n0 = j * kBlockN;
    load_tile_async<kBlockN, kHeadDim, kThreads>(sK + stage * kBlockN * kStride, gK + n0 * p.k.stride_s,
                                                 p.k.stride_s, p.seq_kv - n0);
  };
  const auto load_v = [&](int j, int stage) {
    const int n0 = j * kBlockN;
    load_tile_async<kBlockN, kHeadDim, kThreads>(sV + stage * kBlockN * kStride, gV + n0 * p.v.stride_s,
                                                 p.v.stride_s, p.seq_kv - n0);
  };

  // Prologue: Q and K_0 (and V_0 with two stages) in one group.
  load_tile_async<kBlockM, kHeadDim, kThreads>(sQ, gQ, p.q.stride_s, p.seq_q - m0);
  load_k(0, 0);
  if constexpr (kStages == 2) load_v(0, 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // Q in place: pasa rounds bf16 queries to its fp16 input format; exact flips Q's sign for a
  // negative scale (so that the softmax scales by |alpha| > 0).
  if constexpr (kPasa && std::is_same_v<QElem, __nv_bfloat16>) {
    constexpr int kPairs = kBlockM * kHeadDim / 2;
    for (int i = static_cast<int>(threadIdx.x); i < kPairs; i += kThreads) {
      const int r = i / (kHeadDim / 2), c = 2 * (i % (kHeadDim / 2));
      auto* pair = reinterpret_cast<__nv_bfloat162*>(sQ + r * kStride + c);
      const __half2 hv = __float22half2_rn(__bfloat1622float2(*pair));
      *reinterpret_cast<__half2*>(pair) = hv;
    }
    __syncthreads();
  }
  if constexpr (!kPasa) {
    if (p.negate_q) {
      constexpr int kWords = kBlockM * kStride / 2;
      auto* words = reinterpret_cast<std::uint32_t*>(sQ);
      for (int i = static_cast<int>(threadIdx.x); i < kWords; i += kThreads) words[i] ^= 0x80008000u;
      __syncthreads();
    }
  }

  // The thread's ldmatrix row addresses at the tiles' origins (stage 0).
  const std::uint32_t q_addr = smem_addr(sQ) + warp_row0 * kStride * 2 + a_lane_offset<kStride>(lane);
  const std::uint32_t k_addr = smem_addr(sK) + k_lane_offset<kStride>(lane);
  const std::uint32_t v_addr = smem_addr(sV) + v_lane_offset<kStride>(lane);
  std::uint32_t tSrQ[kQInRegs ? kDChunks : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < kDChunks; ++kk) ldmatrix_x4(tSrQ[kk], q_addr + kk * 16 * 2);
  }

  using Softmax = std::conditional_t<kPasa, PasaSoftmax<kMTiles>, ExactSoftmax<kMTiles>>;
  Softmax softmax;
  softmax.init();
  float tOrO[kPasa ? 1 : kMTiles][kPasa ? 1 : kDTiles][4] = {};  // exact: running O~ in fp32
  __half2 tOrAcc[kPasa ? kMTiles : 1][kPasa ? kDTiles : 1][2];     // pasa: running O~ in fp16 (rows g, g + 8)
  if constexpr (kPasa) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < kDTiles; ++n) tOrAcc[mt][n][0] = tOrAcc[mt][n][1] = __float2half2_rn(0.0f);
    }
  }

  for (int j = 0; j < n_blocks; ++j) {
    const int n0 = j * kBlockN;
    const int stage = kStages == 2 ? (j & 1) : 0;
    if constexpr (kStages == 2) {
      if (j > 0) {
        cp_async_wait<0>();  // K_j, V_j have landed
        __syncthreads();     // ... for every thread; and every warp is done with block j - 1's buffers
      }
      if (j + 1 < n_blocks) {
        load_k(j + 1, stage ^ 1);
        load_v(j + 1, stage ^ 1);
        cp_async_commit();
      }
    } else {
      cp_async_wait<0>();  // K_j has landed
      __syncthreads();     // ... for every thread; and every warp is done reading V_j-1
      load_v(j, 0);
      cp_async_commit();
    }
    const std::uint32_t k_stage = k_addr + stage * kTileBytes;
    const std::uint32_t v_stage = v_addr + stage * kTileBytes;
    const bool needs_mask =
        n0 + kBlockN > p.seq_kv || (p.causal && n0 + kBlockN - 1 > m0 + p.causal_offset);

    // P of this block as A fragments of the P V mma (keys 16 kk .. 16 kk + 15 in tOrP[mt][kk]).
    std::uint32_t tOrP[kMTiles][kNChunks][4];
    float ep[kRows], ec[kRows];  // pasa: rescale factors of the running O~ and of this block's P V
    bool rescale_o = false;      // exact: some row of the warp moved its max
    float rescale[kRows];        // exact: the factor of each row's running O

    if constexpr (kPasa) {
      // S' = Q K'_j^T, leaving the fp32 accumulators as fp16 pairs, kSChunks key parts at a time.
      constexpr int kSChunks = kT.s_chunks;
      constexpr int kPartTiles = kNTiles / kSChunks;
      static_assert(kNTiles % kSChunks == 0 && kPartTiles % 2 == 0, "score parts of whole k16 steps");
#pragma unroll
      for (int part = 0; part < kSChunks; ++part) {
        float tSrS[kMTiles][kPartTiles][4] = {};
        const std::uint32_t k_part = k_stage + part * kPartTiles * 8 * kStride * 2;  // its first key row
        warp_qk<kMTiles, kPartTiles, kDChunks, kStride, MmaElem>(tSrS, q_addr, tSrQ, k_part);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int n = 0; n < kPartTiles; ++n) {
            const int tile = part * kPartTiles + n;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              tOrP[mt][tile / 2][2 * (tile % 2) + i] =
                  pack2<__half>(tSrS[mt][n][2 * i], tSrS[mt][n][2 * i + 1]);
            }
          }
        }
      }
      // Local pseudo-averages: the mean of S' over the block's n_valid keys, masked or not (keys past
      // the sequence end hold S' = 0 exactly: K' is zero-filled there).
      float sums[kMTiles][2];
      rowsum_mma<kMTiles, kNChunks>(tOrP, sums);
      const float n_valid = static_cast<float>(min(kBlockN, p.seq_kv - n0));
      float mean[kRows];  // (quotients to 2 fp32 ulp before the fp16 rounding, as in PasaSoftmax)
#pragma unroll
      for (int r = 0; r < kRows; ++r) mean[r] = round_fp16(__fdividef(sums[r / 2][r % 2], n_valid));
      if (needs_mask) apply_mask(tOrP, p, n0, row_lo);
      float m_blk[kRows];
      Softmax::exponentiate(tOrP, m_blk);  // tOrP now holds P
      rowsum_mma<kMTiles, kNChunks>(tOrP, sums);
      float psum[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) psum[r] = sums[r / 2][r % 2];
      softmax.update(j, m_blk, mean, psum, p.pasa_g, ep, ec);
    } else {
      // S = Q K_j^T (raw: the scale rides in the exponent).
      float tSrS[kMTiles][kNTiles][4] = {};
      warp_qk<kMTiles, kNTiles, kDChunks, kStride, MmaElem, kQInRegs>(tSrS, q_addr, tSrQ, k_stage);
      if (needs_mask) apply_mask(tSrS, p, n0, row_lo);
      rescale_o = __any_sync(0xffffffffu, softmax.step(tSrS, p.scale_log2, rescale));
      scores_to_p_fragments<MmaElem>(tOrP, tSrS);
    }

    if constexpr (kStages == 1) {
      cp_async_wait<0>();  // V_j has landed
      __syncthreads();     // ... for every thread; and every warp is done reading K_j
      if (j + 1 < n_blocks) {
        load_k(j + 1, 0);
        cp_async_commit();
      }
    }

    if constexpr (kPasa) {
      // O~ = fl(fl(ep O~) + fl(ec fl(P V_j))), all in fp16 (the pasa preset's o format). P V_j is
      // formed in parts of the head dim so that its fp32 accumulators fit beside O~ and P.
      constexpr int kParts = kT.pv_parts;
      constexpr int kPartTiles = kDTiles / kParts;
      static_assert(kDTiles % kParts == 0 && kPartTiles % 2 == 0, "head-dim parts of whole tile pairs");
      __half2 ep2[kRows], ec2[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        ep2[r] = __float2half2_rn(ep[r]);
        ec2[r] = __float2half2_rn(ec[r]);
      }
#pragma unroll
      for (int part = 0; part < kParts; ++part) {
        float tOrPV[kMTiles][kPartTiles][4] = {};
        const std::uint32_t v_part = v_stage + part * kPartTiles * 8 * 2;  // its first head-dim column
        warp_pv<kMTiles, kNChunks, kPartTiles, kStride, MmaElem>(tOrPV, tOrP, v_part);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int n = 0; n < kPartTiles; ++n) {
              const __half2 pv = __floats2half2_rn(tOrPV[mt][n][2 * i], tOrPV[mt][n][2 * i + 1]);
              __half2& acc = tOrAcc[mt][part * kPartTiles + n][i];
              acc = __hadd2(__hmul2(ep2[2 * mt + i], acc), __hmul2(ec2[2 * mt + i], pv));
            }
          }
        }
      }
    } else {
      if (rescale_o) scale_rows(tOrO, rescale);
      warp_pv<kMTiles, kNChunks, kDTiles, kStride, MmaElem>(tOrO, tOrP, v_stage);  // O~ += P V_j
    }
  }

  // Epilogue: O = O~ / l (0 for a fully masked row), in the output type.
  float row_l[kRows], lse[kRows];
  if constexpr (kPasa) {
    softmax.finish(p.pasa_g, row_l, lse);
  } else {
    softmax.finish(row_l, lse);
  }
  const int t = lane % 4;
  float inv_l[kRows];  // 0 for a fully masked row (LSE -inf: no visible key, or a zero sum)
#pragma unroll
  for (int r = 0; r < kRows; ++r) inv_l[r] = lse[r] == -INFINITY ? 0.0f : 1.0f / row_l[r];
  const auto out_value = [&](int mt, int i, int n, int e) {
    const int r = 2 * mt + i;
    if constexpr (kPasa) {  // the emulator divides in fp32 and rounds to the o format
      const float2 acc = __half22float2(tOrAcc[mt][n][i]);
      return round_fp16((e == 0 ? acc.x : acc.y) * inv_l[r]);
    } else {
      return tOrO[mt][n][2 * i + e] * inv_l[r];
    }
  };
  if (kT.epilogue == Epilogue::staged && p.o_type != ElemType::f32) {
    // The warp's rows of sQ: only this warp ever read them; its lanes' last reads are done.
    using Staged = StagedOutput<16 * kMTiles, kHeadDim, kStride>;
    const Staged out{reinterpret_cast<char*>(sQ + warp_row0 * kStride)};
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int n = 0; n < kDTiles; ++n) {
          out.put(p.o_type, 16 * mt + 8 * i + lane / 4, 8 * n + 2 * t, out_value(mt, i, n, 0),
                  out_value(mt, i, n, 1));
        }
        store_lse(p, b, h, row_lo + 16 * mt + 8 * i, lse[2 * mt + i]);
      }
    }
    out.flush(p, b, h, m0 + warp_row0);
  } else {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float o_row[kDTiles][2];
#pragma unroll
        for (int n = 0; n < kDTiles; ++n) {
          o_row[n][0] = out_value(mt, i, n, 0);
          o_row[n][1] = out_value(mt, i, n, 1);
        }
        store_output_row(p, b, h, row_lo + 16 * mt + 8 * i, o_row, lse[2 * mt + i]);
      }
    }
  }
}

// Host side: one launch of an instantiation. Throws pasa::Error on a CUDA error.
template <class TileOf, typename QElem, bool kPasa>
void launch_fwd(const FwdParams& p, int batch, cudaStream_t stream) {
  constexpr FwdTile kT = TileOf::value;
  auto* kernel = attention_fwd_kernel<TileOf, QElem, kPasa>;
  constexpr int smem = kT.smem_bytes();
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "cudaFuncSetAttribute(attention_fwd_kernel, max dynamic shared memory)");
  // All of the unified L1 / shared memory as shared memory: two CTAs of up to 104 KB each per SM
  // (the kernels read global memory through cp.async.cg, which bypasses L1).
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared),
             "cudaFuncSetAttribute(attention_fwd_kernel, carveout)");
  const dim3 grid((p.seq_q + kT.block_m() - 1) / kT.block_m(), p.heads_q, batch);
  kernel<<<grid, kT.threads(), smem, stream>>>(p);
  check_launch("attention_fwd_kernel launch");
}

}  // namespace pasa::cuda
