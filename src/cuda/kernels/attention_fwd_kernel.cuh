// SPDX-License-Identifier: Apache-2.0
// The exact policy's forward attention kernel (FlashAttention-2 structure on mma.sync m16n8k16),
// composed from the pieces beside it: fwd_tiles (the CTA shape), tile_load (cp.async with zero fill),
// warp_mma (the warp's Q K^T and P V), fwd_mask, online_softmax (the exact row step), epilogue (O and
// LSE).
//
// The sliding window, the logit softcap and the attention mask run in an instantiation of their own
// (ScoreMods::all), so that the plain one keeps its registers: its CTAs visit only the key blocks the
// window leaves them (fwd_mask.cuh, as the Hopper kernel does), soft-cap the raw scores, then add or
// apply the mask before the causal / window / sequence-end masks.
//
// One CTA = kWarps warps = one block of kBlockM = 16 kMTiles kWarps query rows of one (batch, head);
// each warp owns 16 kMTiles rows and reads its Q fragments from shared memory each k step (one m-tile
// per warp keeps them in registers instead). With two stages, K_j+1 and V_j+1 load into the other
// buffers while block j computes (one barrier per block); with one, V_j loads under Q K_j^T and
// K_j+1 under P V_j (two barriers per block). Causal CTAs are launched longest first.
//
// v1: 1 m-tile per warp, one stage, direct O stores: exact at 215-278 TFLOP/s on an H200
//   (2026-11-22), 0.8x torch's FlashAttention-2 backend.
// v2 (this file): 2 m-tiles per warp (each K / V fragment read feeds two MMAs: +26%), tile loads
//   whose addressing stays out of the mainloop's registers, the exact scale folded into the
//   exponent's FFMA, O's rescale skipped for warps whose row maxima all stayed. Two stages and O
//   staged through shared memory are supported and chosen per shape by fwd_tiles.h (measured: one
//   stage everywhere). Exact 294-346 TFLOP/s at S >= 4k, 0.97-1.09x FA2. ncu: HMMA pipe 46-56% busy,
//   issue slots 35-42%, stalls mostly fixed-latency waits with 2 warps per scheduler: the mma.sync /
//   255-register ceiling. bench/NOTES.md has the numbers. (The pasa policy ran on this kernel until
//   the fourth session; it now has its own wgmma kernel, attention_fwd_pasa.cu.) Next: wgmma + bulk
//   copies as the pasa and sage8 kernels have them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/once_per_device.h"
#include "cuda/block/epilogue.cuh"
#include "cuda/host/fwd_tiles.h"
#include "cuda/block/fwd_mask.cuh"
#include "cuda/host/kernel_params.h"
#include "cuda/block/online_softmax.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/pipeline/tile_load.cuh"
#include "cuda/arch/warp_mma.cuh"
#include "pasa/error.h"

namespace pasa::cuda {

// Which score modifications an instantiation runs beyond the causal and sequence-end masks: none
// (the fast path), or all of the sliding window, the logit softcap and the attention mask, each as
// FwdParams asks (FwdParams::has_score_mods).
enum class ScoreMods : int { none = 0, all = 1 };

// The tile of an instantiation, as a type (C++17 has no class-type template parameters).
template <int kHeadDim, int kVariant = 0>
struct FwdTileOf {
  static constexpr FwdTile value = variant_tile(exact_tile(kHeadDim), static_cast<FwdVariant>(kVariant));
};

template <int kHeadDim>
struct ScoreModsTileOf {
  static constexpr FwdTile value = score_mods_tile(kHeadDim);
};

// The exact policy's tile for an instantiation of kMods.
template <int kHeadDim, ScoreMods kMods>
using ExactTileOf = std::conditional_t<kMods == ScoreMods::none, FwdTileOf<kHeadDim>, ScoreModsTileOf<kHeadDim>>;

template <class TileOf, typename QElem, ScoreMods kMods = ScoreMods::none>
__global__ void __launch_bounds__(TileOf::value.threads(), TileOf::value.min_ctas_per_sm())
    attention_fwd_kernel(const __grid_constant__ FwdParams p) {
  constexpr bool kScoreMods = kMods == ScoreMods::all;
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
  constexpr int kKvRow = kT.kv_row_elems();  // elements a K / V row takes in shared memory
  constexpr std::uint32_t kTileBytes = kBlockN * kKvRow * 2;
  static_assert(kStride == smem_row_stride<kHeadDim>(), "tile_load and the tile table agree on padding");
  using QRows = PaddedRows<kStride>;
  using KvRows = TileRows<kT.swizzled_kv, kHeadDim>;
  static_assert(kStages == 1 || kStages == 2, "one or two K / V stages");
  // Q stays in registers where a warp has one m-tile (the v1 shape) and the head dim leaves room for
  // it beside O (at 256, Q's 64 registers and O's 128 would not fit in 255).
  constexpr bool kQInRegs = kMTiles == 1 && kHeadDim <= 128;
  using KVElem = QElem;
  using MmaElem = QElem;

  // (128-byte aligned, as SwizzledRows needs; the padded Q rows take a multiple of 128 bytes, so K's
  // and V's tiles start on such boundaries too)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  QElem* sQ = reinterpret_cast<QElem*>(smem_raw);                  // [kBlockM][kStride]
  KVElem* sK = reinterpret_cast<KVElem*>(sQ + kBlockM * kStride);  // [kStages][kBlockN][kKvRow]
  KVElem* sV = sK + kStages * kBlockN * kKvRow;                    // [kStages][kBlockN][kKvRow]
  static_assert(kBlockM * kStride * 2 % 128 == 0, "K's tiles on 128-byte boundaries");

  const auto [warp, lane, h, b, h_kv, m0] = portable_cta(p, kBlockM);
  const int warp_row0 = warp * 16 * kMTiles;     // the warp's first row in the CTA's tile
  const int row_lo = m0 + warp_row0 + lane / 4;  // this thread's rows: row_lo + 16 mt + 8 i

  // Key blocks [kb_first, kb_end) hold the keys visible to at least one row of the block (without a
  // window, which only the kScoreMods instantiation runs, they start at 0).
  const int kb_first = kScoreMods ? first_key_block(p, m0, kBlockN) : 0;
  const int kb_end = visited_key_blocks(p, m0, kBlockM, kBlockN, (p.seq_kv + kBlockN - 1) / kBlockN);
  if (kb_end <= kb_first) {  // every row fully masked: O = 0, LSE = -inf
    const float zero[kDTiles][2] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r) store_output_row(p, b, h, row_lo + 8 * r, zero, -INFINITY);
    return;
  }

  const QElem* gQ = static_cast<const QElem*>(p.q.data) + b * p.q.stride_b + h * p.q.stride_h +
                    m0 * p.q.stride_s;  // [kBlockM, D] tile
  const KVElem* gK = static_cast<const KVElem*>(p.k.data) + b * p.k.stride_b + h_kv * p.k.stride_h;
  const KVElem* gV = static_cast<const KVElem*>(p.v.data) + b * p.v.stride_b + h_kv * p.v.stride_h;
  const auto load_k = [&](int j, int stage) {
    const int n0 = j * kBlockN;
    load_tile_async<kBlockN, kHeadDim, kThreads, KVElem, 0, KvRows>(
        sK + stage * kBlockN * kKvRow, gK + n0 * p.k.stride_s, p.k.stride_s, p.seq_kv - n0);
  };
  const auto load_v = [&](int j, int stage) {
    const int n0 = j * kBlockN;
    load_tile_async<kBlockN, kHeadDim, kThreads, KVElem, 0, KvRows>(
        sV + stage * kBlockN * kKvRow, gV + n0 * p.v.stride_s, p.v.stride_s, p.seq_kv - n0);
  };

  // Prologue: Q and the first K (and V with two stages) in one group.
  load_tile_async<kBlockM, kHeadDim, kThreads>(sQ, gQ, p.q.stride_s, p.seq_q - m0);
  load_k(kb_first, 0);
  if constexpr (kStages == 2) load_v(kb_first, 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // Q in place: flipped in sign for a negative scale (so that the softmax scales by |alpha| > 0).
  if (p.negate_q) {
    constexpr int kWords = kBlockM * kStride / 2;
    auto* words = reinterpret_cast<std::uint32_t*>(sQ);
    for (int i = static_cast<int>(threadIdx.x); i < kWords; i += kThreads) words[i] ^= 0x80008000u;
    __syncthreads();
  }

  // The thread's ldmatrix row addresses at the tiles' origins (stage 0).
  const std::uint32_t q_addr = smem_addr(sQ) + warp_row0 * kStride * 2 + a_lane_offset<QRows>(lane);
  const std::uint32_t k_addr = smem_addr(sK) + k_lane_offset<KvRows>(lane);
  const std::uint32_t v_addr = smem_addr(sV) + v_lane_offset<KvRows>(lane);
  std::uint32_t tSrQ[kQInRegs ? kDChunks : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < kDChunks; ++kk) ldmatrix_x4(tSrQ[kk], q_addr + kk * 16 * 2);
  }

  ExactSoftmax<kMTiles> softmax;
  softmax.init();
  float tOrO[kMTiles][kDTiles][4] = {};  // running O~ in fp32

  for (int j = kb_first; j < kb_end; ++j) {
    const int n0 = j * kBlockN;
    const int stage = kStages == 2 ? ((j - kb_first) & 1) : 0;
    if constexpr (kStages == 2) {
      if (j > kb_first) {
        cp_async_wait<0>();  // K_j, V_j have landed
        __syncthreads();     // ... for every thread; and every warp is done with block j - 1's buffers
      }
      if (j + 1 < kb_end) {
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
    const bool needs_mask = kScoreMods ? block_needs_mask(p, n0, kBlockN, m0 + warp_row0, 16 * kMTiles)
                                       : n0 + kBlockN > p.seq_kv ||
                                             (p.causal && n0 + kBlockN - 1 > m0 + p.causal_offset);

    // P of this block as A fragments of the P V mma (keys 16 kk .. 16 kk + 15 in tOrP[mt][kk]).
    std::uint32_t tOrP[kMTiles][kNChunks][4];
    float rescale[kRows];  // the factor of each row's running O

    // S = Q K_j^T (raw: the scale rides in the exponent, except where a softcap scales it first).
    float tSrS[kMTiles][kNTiles][4] = {};
    warp_qk<kMTiles, kNTiles, kDChunks, QRows, KvRows, MmaElem, kQInRegs>(tSrS, q_addr, tSrQ, k_stage);
    if constexpr (kScoreMods) {
      if (p.softcap > 0.0f) apply_softcap(tSrS, p);
      if (p.mask_type != MaskType::none) apply_attn_mask(tSrS, p, b, h, n0, row_lo);
    }
    if (needs_mask) apply_mask(tSrS, p, n0, row_lo);
    const float scale_log2 = kScoreMods && p.softcap > 0.0f ? kLog2e : p.scale_log2;
    const bool rescale_o = __any_sync(0xffffffffu, softmax.step(tSrS, scale_log2, rescale));  // a max moved
    scores_to_p_fragments<MmaElem>(tOrP, tSrS);

    if constexpr (kStages == 1) {
      cp_async_wait<0>();  // V_j has landed
      __syncthreads();     // ... for every thread; and every warp is done reading K_j
      if (j + 1 < kb_end) {
        load_k(j + 1, 0);
        cp_async_commit();
      }
    }

    if (rescale_o) scale_rows(tOrO, rescale);
    warp_pv<kMTiles, kNChunks, kDTiles, KvRows, MmaElem>(tOrO, tOrP, v_stage);  // O~ += P V_j
  }

  // Epilogue: O = O~ / l (0 for a fully masked row), in the output type.
  float row_l[kRows], lse[kRows];
  softmax.finish(row_l, lse);
  const int t = lane % 4;
  float inv_l[kRows];  // 0 for a fully masked row (LSE -inf: no visible key, or a zero sum)
#pragma unroll
  for (int r = 0; r < kRows; ++r) inv_l[r] = lse[r] == -INFINITY ? 0.0f : 1.0f / row_l[r];
  const auto out_value = [&](int mt, int i, int n, int e) {
    return tOrO[mt][n][2 * i + e] * inv_l[2 * mt + i];
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
template <class TileOf, typename QElem, ScoreMods kMods = ScoreMods::none>
void launch_fwd(const FwdParams& p, int batch, cudaStream_t stream) {
  constexpr FwdTile kT = TileOf::value;
  auto* kernel = attention_fwd_kernel<TileOf, QElem, kMods>;
  constexpr int smem = kT.smem_bytes();
  static OncePerDevice configured;
  // (all of the unified L1 / shared memory as shared memory: two CTAs of up to 104 KB each per SM)
  configured([&] { set_shared_memory(kernel, smem, true, "cudaFuncSetAttribute(attention_fwd_kernel)"); });
  const dim3 grid((p.seq_q + kT.block_m() - 1) / kT.block_m(), p.heads_q, batch);
  kernel<<<grid, kT.threads(), smem, stream>>>(p);
  check_launch("attention_fwd_kernel launch");
}

// The exact policy's instantiations of one ScoreMods: fp16 / bf16 inputs, head dims 64, 96, 128 and
// 256, CTA shapes from fwd_tiles.h (ExactTileOf).
template <ScoreMods kMods, typename Elem>
void launch_exact_dim(const FwdParams& p, int batch, int head_dim, cudaStream_t s) {
  switch (head_dim) {
    case 64: launch_fwd<ExactTileOf<64, kMods>, Elem, kMods>(p, batch, s); break;
    case 96: launch_fwd<ExactTileOf<96, kMods>, Elem, kMods>(p, batch, s); break;
    case 128: launch_fwd<ExactTileOf<128, kMods>, Elem, kMods>(p, batch, s); break;
    case 256: launch_fwd<ExactTileOf<256, kMods>, Elem, kMods>(p, batch, s); break;
    default: throw Error("exact kernel: head dim must be 64, 96, 128 or 256");
  }
}

template <ScoreMods kMods>
void launch_exact_portable(const FwdParams& p, int batch, int head_dim, ElemType in_type, cudaStream_t s) {
  if (in_type == ElemType::f16) {
    launch_exact_dim<kMods, __half>(p, batch, head_dim, s);
  } else if (in_type == ElemType::bf16) {
    launch_exact_dim<kMods, __nv_bfloat16>(p, batch, head_dim, s);
  } else {
    throw Error("exact kernel: inputs must be f16 or bf16");
  }
}

// ScoreMods::all's instantiations (attention_fwd_exact_score_mods.cu: a translation unit of their own,
// compiled beside the plain ones).
void launch_exact_portable_score_mods(const FwdParams& p, int batch, int head_dim, ElemType in_type,
                                      cudaStream_t s);

}  // namespace pasa::cuda
