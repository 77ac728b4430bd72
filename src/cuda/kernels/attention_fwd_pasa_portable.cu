// SPDX-License-Identifier: Apache-2.0
// The pasa and pasa_accurate policies on the portable path (sm_80 instructions: mma.sync m16n8k16,
// ldmatrix, cp.async): PASA's Algorithm 1 (docs/algorithms.md section 3) at the emulator's rounding
// points, as the sm_90a kernel computes it (hopper_pasa_mainloop.cuh), from the same prepass
// (pasa_prepare.cu: K' = M K in fp16, as tiles with 8 mean rows, pasa_stage.cuh) and the same per-row
// state (PasaSoftmax, online_softmax.cuh). It composes the exact kernel's pieces (tile_load, warp_mma,
// fwd_mask, epilogue); its mainloop is its own, since every step differs: 128-key blocks with the mean
// rows, the state in fp16, O~ in fp16.
//
// One CTA = 8 warps = 128 query rows of one (batch, head), launched longest first when causal; each
// warp owns one m16 tile and keeps its Q fragments in registers (bf16 Q rounded to fp16 in shared
// memory first). K' and V pass through two shared-memory slots in slices of the head's channels
// (PasaPortableTile: one slice up to head dim 128, two at 256); a block's phases are K'_j's slices,
// then V_j's, and each phase's copy is issued under the previous phase's compute (one barrier a
// phase). Per key block of s2 = 128 keys:
//   K'_j (the prepass's stage) by cp.async into padded rows, its 128-byte swizzle undone on the way;
//   S' = Q K'^T with fp32 accumulators (the policies' qk_acc), 16 n8 tiles of scores, and a 17th
//     against the mean rows: each row's mean of S' as hi + lo 2^-11 (about 22 bits);
//   S' rounded to fp16 pairs (pasa) or kept in fp32 (pasa_accurate), masked, the block max,
//     P = fl(e^(fl(S' - m))) as the A fragments of P V;
//   P times a fragment of ones: the row sums of P, then PASA's state update (the two rescale factors;
//     its headroom's O~ rule weighs the block by those sums and its largest |V|, the prepass's slots);
//   P V into fresh fp32 accumulators (pv_acc), a pass of pv_tiles() n8 tiles at a time;
//   O~ = fl(fl(ep O~) + fl(ec fl(P V))) in fp16, and l likewise (pasa_accurate's factors are fp32
//     state: each product is rounded to fp16 once from its exact value, as the emulator rounds it;
//     a block of large V: fl(P V) at a power of two below it, pasa_headroom.h).
// bf16 V is rounded to fp16 in shared memory. Epilogue: O = fl(O~ / l), LSE = m + log l.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/arch/cuda_check.h"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/warp_mma.cuh"
#include "cuda/arch/wgmma.cuh"  // swizzled_offset: the prepass's stage layout
#include "cuda/block/epilogue.cuh"
#include "cuda/block/fwd_mask.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/block/pasa_prepass.cuh"
#include "cuda/block/pasa_stage.cuh"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/once_per_device.h"
#include "cuda/kernels/launch_dispatch.h"
#include "cuda/pipeline/tile_load.cuh"

namespace pasa::cuda {
namespace {

// Copies channels [ch0, ch0 + kSliceDim) of one prepass stage (kKRows rows of D fp16 channels,
// swizzled 64-channel atoms) into `smem` as plain rows of kStride elements, 16 bytes per cp.async.
// Issued by all kThreads threads; the caller commits the group. Consecutive threads read consecutive
// 16-byte chunks of a 128-byte atom row, in swizzled order: whole rows, coalesced.
template <int D, int kSliceDim, int kThreads>
__device__ __forceinline__ void load_stage_async(__half* smem, const std::uint8_t* stage, int ch0) {
  using Stage = PasaStage<D>;
  constexpr int kStride = smem_row_stride<kSliceDim>();
  constexpr int kChunksPerRow = kSliceDim / 8;
  constexpr int kChunks = Stage::kKRows * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * kThreads;
    if (kChunks % kThreads == 0 || c < kChunks) {
      const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      cp_async_16(smem_addr(smem + row * kStride + col),
                  stage + swizzled_offset<128>(Stage::k_offset(row, ch0 + col)), true);
    }
  }
}

// QElem: the input type (bf16 Q and V are rounded to fp16 in shared memory). kAccurate: pasa_accurate
// (S' and the softmax state in fp32). One CTA an SM.
template <int D, typename QElem, bool kAccurate>
__global__ void __launch_bounds__(PasaPortableTile{D}.threads(), 1)
    attention_fwd_pasa_portable_kernel(const __grid_constant__ FwdParams p,
                                       const std::uint8_t* __restrict__ k_tiles, const float* __restrict__ v_max) {
  constexpr PasaPortableTile kT{D};
  constexpr int kThreads = kT.threads();
  constexpr int kBlockM = kT.block_m();
  constexpr int kKeys = kPasaBlockKv;
  constexpr int kSlices = kT.slices();
  constexpr int kSliceDim = kT.slice_dim();
  constexpr int kStride = kT.smem_stride();
  constexpr int kPhases = 2 * kSlices;            // a block's copies: K'_j's slices, then V_j's
  constexpr int kNTiles = kKeys / 8;              // n8 score tiles of a block
  constexpr int kNChunks = kKeys / 16;            // k16 steps of P V
  constexpr int kDTiles = D / 8;                  // n8 tiles of O
  constexpr int kSliceChunks = kSliceDim / 16;    // k16 steps of S' in a slice
  constexpr int kSliceTiles = kSliceDim / 8;      // n8 tiles of O in a slice
  constexpr int kPvTiles = kT.pv_tiles();         // n8 tiles of O in one P V pass
  constexpr bool kBf16 = std::is_same_v<QElem, __nv_bfloat16>;
  using Stage = PasaStage<D>;
  using Softmax = PasaSoftmax<1, !kAccurate, pasa_base2(kAccurate)>;
  static_assert(kStride == smem_row_stride<kSliceDim>(), "tile_load and the tile agree on padding");
  static_assert(PasaPortableTile::kKRows == Stage::kKRows, "a K' slot holds a stage's rows");
  static_assert(kBlockM <= PasaPortableTile::kKRows, "Q's slices fit in the slots");
  static_assert(kSliceTiles % kPvTiles == 0, "whole P V passes");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const auto slot = [&](int phase) {  // [kKRows][kStride]: the copy of phase `phase` (mod 2)
    return reinterpret_cast<__half*>(smem_raw) + (phase % 2) * kT.slot_elems();
  };

  const auto [warp, lane, h, b, h_kv, m0] = portable_cta(p, kBlockM);
  const int warp_row0 = m0 + warp * 16;  // the warp's first row
  const int row = warp_row0 + lane / 4;  // this thread's rows: row, row + 8

  const int n_kb = (p.seq_kv + kKeys - 1) / kKeys;  // the prepass's stages per (batch, K/V head)
  const int n_blocks = visited_key_blocks(p, m0, kBlockM, kKeys, n_kb);  // keys some row of the CTA sees
  if (n_blocks == 0) {  // every row fully masked: O = 0, LSE = -inf
    const float zero[kDTiles][2] = {};
    store_output_row(p, b, h, row, zero, -INFINITY);
    store_output_row(p, b, h, row + 8, zero, -INFINITY);
    return;
  }
  const int heads_kv = p.heads_q / p.group;
  const std::int64_t stage0 = (static_cast<std::int64_t>(b) * heads_kv + h_kv) * n_kb;
  const std::uint8_t* gK = k_tiles + stage0 * Stage::kBytes;
  const QElem* gV = static_cast<const QElem*>(p.v.data) + b * p.v.stride_b + h_kv * p.v.stride_h;
  // Issues the copy of block j's phase t (K'_j's slice t, or V_j's slice t - kSlices) into its slot.
  const auto load_phase = [&](int j, int t) {
    if (t < kSlices) {
      load_stage_async<D, kSliceDim, kThreads>(slot(t), gK + static_cast<std::int64_t>(j) * Stage::kBytes,
                                               t * kSliceDim);
    } else {
      const int n0 = j * kKeys;
      load_tile_async<kKeys, kSliceDim, kThreads>(reinterpret_cast<QElem*>(slot(t)),
                                                  gV + n0 * p.v.stride_s + (t - kSlices) * kSliceDim,
                                                  p.v.stride_s, p.seq_kv - n0);
    }
    cp_async_commit();
  };

  // Prologue: Q's slices into the slots (slice s into slot s + 1), each warp's Q fragments into
  // registers. With one slice, K'_0 loads beside Q into the slot Q leaves free.
  const QElem* gQ = static_cast<const QElem*>(p.q.data) + b * p.q.stride_b + h * p.q.stride_h + m0 * p.q.stride_s;
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    load_tile_async<kBlockM, kSliceDim, kThreads>(reinterpret_cast<QElem*>(slot(s + 1)), gQ + s * kSliceDim,
                                                  p.q.stride_s, p.seq_q - m0);
  }
  if constexpr (kSlices == 1) load_stage_async<D, kSliceDim, kThreads>(slot(0), gK, 0);
  cp_async_commit();
  cp_async_wait<0>();
  if constexpr (kBf16) {
#pragma unroll
    for (int s = 0; s < kSlices; ++s) own_chunks_bf16_to_half<kBlockM, kSliceDim, kThreads>(slot(s + 1));
  }
  __syncthreads();
  std::uint32_t tSrQ[kSlices][kSliceChunks][4];
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    const std::uint32_t q_addr = smem_addr(slot(s + 1)) + warp * 16 * kStride * 2 + a_lane_offset<PaddedRows<kStride>>(lane);
#pragma unroll
    for (int kk = 0; kk < kSliceChunks; ++kk) ldmatrix_x4(tSrQ[s][kk], q_addr + kk * 16 * 2);
  }
  if constexpr (kSlices > 1) {
    __syncthreads();  // every warp holds its Q: both slots are free
    load_phase(0, 0);
  }

  // Waits for the copy of phase t and publishes it (bf16 V rounded to fp16 by the threads that copied
  // it), then issues the next phase's copy into the other slot, which every warp is done reading.
  const auto next_phase = [&](int j, int t) {
    cp_async_wait<0>();
    if constexpr (kBf16) {
      if (t >= kSlices) own_chunks_bf16_to_half<kKeys, kSliceDim, kThreads>(slot(t));
    }
    __syncthreads();
    if (t + 1 < kPhases) {
      load_phase(j, t + 1);
    } else if (j + 1 < n_blocks) {
      load_phase(j + 1, 0);
    }
  };
  const std::uint32_t lane_k = k_lane_offset<PaddedRows<kStride>>(lane);
  const std::uint32_t lane_v = v_lane_offset<PaddedRows<kStride>>(lane);
  Softmax softmax;
  softmax.init();
  __half2 tOrO[kDTiles][2];  // O~ in fp16: tile n's pair of row `row` (i = 0) and of row + 8 (i = 1)
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) tOrO[n][0] = tOrO[n][1] = __float2half2_rn(0.0f);

  for (int j = 0; j < n_blocks; ++j) {
    const int n0 = j * kKeys;
    // The block's largest |V| (the prepass's slots, written by the kernel before this one), read while
    // S' is computed.
    const float v_blk =
        pasa_stage_v_max<Stage::kKAtoms>(v_max + (stage0 + j) * kPasaVMaxSlots, [](const float* at) { return *at; });
    // S' = Q K'_j^T, and against the mean rows: column 2t is Q . hi, 2t + 1 is Q . lo (every t).
    float tSrS[1][kNTiles][4] = {};
    float tSrMean[4] = {};
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      next_phase(j, s);
      const std::uint32_t k_addr = smem_addr(slot(s)) + lane_k;
      const std::uint32_t mean_addr = k_addr + kKeys * kStride * 2;  // lanes 0-15: the mean rows (x2)
      warp_qk<1, kNTiles, kSliceChunks, PaddedRows<kStride>, PaddedRows<kStride>, __half, true>(tSrS, 0, tSrQ[s], k_addr);
#pragma unroll
      for (int kk = 0; kk < kSliceChunks; ++kk) {
        std::uint32_t bm[2];
        ldmatrix_x2(bm, mean_addr + kk * 16 * 2);
        mma_16816<__half>(tSrMean, tSrQ[s][kk], bm[0], bm[1]);
      }
    }
    constexpr float kLo = 1.0f / kMeanLoScale;
    const float mean[2] = {fmaf(tSrMean[1], kLo, tSrMean[0]),
                           fmaf(tSrMean[3], kLo, tSrMean[2])};

    // The block max of the masked S', then P as the P V A fragments.
    const bool needs_mask = block_needs_mask(p, n0, kKeys, warp_row0);
    std::uint32_t tOrP[1][kNChunks][4];
    float m_blk[2];
    [[maybe_unused]] __half2 m_use[2];  // pasa: the fp16 shift of the exponentials
    if constexpr (kAccurate) {
      if (needs_mask) apply_mask(tSrS, p, n0, row);
      Softmax::block_max_fp32(tSrS, m_blk);
    } else {
      scores_to_p_fragments<__half>(tOrP, tSrS);  // S' rounded to fp16
      if (needs_mask) apply_mask(tOrP, p, n0, row);
      Softmax::block_max(tOrP, m_blk, m_use);
    }
#pragma unroll
    for (int kc = 0; kc < kNChunks; ++kc) {
      if constexpr (kAccurate) {
        Softmax::exponentiate_fp32(tOrP[0][kc], tSrS, m_blk, 0, kc);
      } else {
        Softmax::exponentiate_chunk(tOrP[0][kc], m_use, 0);
      }
    }
    // The row sums of P (P times ones: every column the row's sum).
    float psum[4] = {};
#pragma unroll
    for (int kc = 0; kc < kNChunks; ++kc) mma_16816<__half>(psum, tOrP[0][kc], kOnesHalf2, kOnesHalf2);
    const float row_psum[2] = {psum[0], psum[2]};
    // PASA's update, its O~ rule weighing the block by its row sum of P (pasa_headroom.h).
    float ep[2], ec[2];
    softmax.rescale(Softmax::candidate(m_blk, mean, p.pasa_g), v_blk, Softmax::row_weight(row_psum), ep, ec);
    softmax.add_block(row_psum);

    const int shift = pasa_pv_shift(v_blk, kKeys);  // (the same in every thread: a uniform branch)
    // P V_j slice by slice, pass by pass into fresh fp32 sums, each added into O~.
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      next_phase(j, kSlices + s);
#pragma unroll
      for (int pass = 0; pass < kSliceTiles / kPvTiles; ++pass) {
        const int c0 = s * kSliceTiles + pass * kPvTiles;  // the pass's first n8 tile of O
        float tOrPV[1][kPvTiles][4] = {};
        warp_pv<1, kNChunks, kPvTiles, PaddedRows<kStride>, __half>(tOrPV, tOrP, smem_addr(slot(kSlices + s)) + lane_v +
                                                                         pass * kPvTiles * 8 * 2);
        // O~ = fl(fl(ep O~) + fl(ec fl(P V))) for the pass's tiles. A block of large V (shift > 0,
        // pasa_headroom.h) rounds P V at 2^-shift times its value, and its factor carries the 2^shift.
        const auto fold = [&](auto shifted) {
          const PvShift<decltype(shifted)::value> pv_shift(shift);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const float ec_up = pv_shift.factor(ec[i]);
            const __half2 ep2 = __float2half2_rn(ep[i]), ec2 = __float2half2_rn(ec_up);  // pasa: fp16 values, exact
#pragma unroll
            for (int n = 0; n < kPvTiles; ++n) {
              const __half2 block = pv_shift.pair(&tOrPV[0][n][2 * i]);
              if constexpr (kAccurate) {
                tOrO[c0 + n][i] = rescale_add_half2_once(ep[i], tOrO[c0 + n][i], ec_up, block);
              } else {  // (mul.rn: ptxas would otherwise fuse a product into the add, one rounding fewer)
                tOrO[c0 + n][i] = __hadd2(__hmul2_rn(ep2, tOrO[c0 + n][i]), __hmul2_rn(ec2, block));
              }
            }
          }
        };
        if (shift != 0) {
          fold(std::true_type{});
        } else {
          fold(std::false_type{});
        }
      }
    }
  }

  // Epilogue: O = fl(O~ / l) (0 for a row that saw no key; saturated at fp16's largest value, as
  // OutRounding::via_fp16 says), the LSE.
  float row_l[2], lse[2];
  softmax.finish(row_l, lse);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float o_row[kDTiles][2];
#pragma unroll
    for (int n = 0; n < kDTiles; ++n) {
      const float2 o = __half22float2(tOrO[n][i]);
      o_row[n][0] = lse[i] == -INFINITY ? 0.0f : round_fp16_satfinite(__fdiv_rn(o.x, row_l[i]));
      o_row[n][1] = lse[i] == -INFINITY ? 0.0f : round_fp16_satfinite(__fdiv_rn(o.y, row_l[i]));
    }
    store_output_row(p, b, h, row + 8 * i, o_row, lse[i]);
  }
}

template <int D, typename QElem, bool kAccurate>
void launch_typed(const PasaRequest& r, cudaStream_t stream) {
  constexpr PasaPortableTile kT{D};
  const KernelRequest& c = r.call;
  const FwdParams& p = c.fwd;
  const int n_kb = (p.seq_kv + kPasaBlockKv - 1) / kPasaBlockKv;
  check_pasa_prepass(c, n_kb);
  StreamBuffer tiles(pasa_scratch_bytes(c, false), c.device, stream);
  auto* k_tiles = static_cast<std::uint8_t*>(tiles.get());
  const PasaPrepass prepass = pasa_prepass(r, k_tiles, nullptr, n_kb);
  launch_pasa_tiles(prepass, c, stream);
  const float* v_max = prepass.v_max;
  auto* kernel = attention_fwd_pasa_portable_kernel<D, QElem, kAccurate>;
  static OncePerDevice configured;
  configured([&] {
    set_shared_memory(kernel, kT.smem_bytes(), true, "cudaFuncSetAttribute(attention_fwd_pasa_portable_kernel)");
  });
  const dim3 grid((p.seq_q + kT.block_m() - 1) / kT.block_m(), p.heads_q, c.batch);
  kernel<<<grid, kT.threads(), kT.smem_bytes(), stream>>>(p, k_tiles, v_max);
  check_launch("attention_fwd_pasa_portable_kernel launch");
}

}  // namespace

void launch_pasa_portable(const PasaRequest& r, void* stream) {
  dispatch_pasa<64, 96, 128, 256>(r, "pasa kernel (portable)", [&]<typename QElem, int D, bool kAccurate>() {
    launch_typed<D, QElem, kAccurate>(r, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace pasa::cuda
