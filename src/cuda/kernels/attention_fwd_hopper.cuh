// SPDX-License-Identifier: Apache-2.0
// The Hopper (sm_90a) forward-attention engine: one warp-specialized, persistent kernel skeleton
// whose policy-specific parts come in as a Variant type (the exact policy's is in
// attention_fwd_exact_hopper.cu). FlashAttention-3's structure (Shah et al., 2024, sections 3.1-3.2):
//
// - Warp specialization. Warpgroup 0 is the producer: one thread issues every bulk tensor copy (TMA)
//   of Q, K and V into shared memory, the warpgroup gives most of its registers back (setmaxnreg).
//   Warpgroups 1 .. kConsumers (2 or 3, HopperTile) each own 64 query rows of the CTA's block and
//   only compute.
// - A kStages ring of K and of V slots on mbarriers (tile_ring.cuh): the producer runs ahead by up to
//   kStages key blocks of both, across tile boundaries; Q has a one-slot ring of its own.
// - Intra-warpgroup overlap: block j's S = Q K_j^T is issued before block j - 1's P V, so that the
//   softmax of block j runs on the CUDA cores while the tensor cores do P_{j-1} V_{j-1}.
// - Both GEMMs on wgmma: S from Q and K in shared memory (ss), O from P in registers and V in
//   shared memory (rs, V MN-major as it lies in memory).
// - Persistent CTAs (one per SM) over a static tile order, causal tiles longest first
//   (tile_scheduler.cuh).
//
// The Variant supplies the element type (Elem: Q, K, V and P), the online softmax (Softmax: init,
// step on one block's masked fp32 scores giving P in place and O's rescale factors, finish giving the
// row sums and the LSE) and, through Softmax, every rounding point of the policy. The mainloop, the
// pipeline, the scheduler and the epilogue are written once here.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/arch/mbarrier.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/arch/warpgroup.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/arch/wgmma_16bit.cuh"
#include "cuda/block/epilogue.cuh"
#include "cuda/block/fwd_mask.cuh"
#include "cuda/host/kernel_params.h"
#include "cuda/pipeline/tile_ring.cuh"
#include "cuda/pipeline/tile_scheduler.cuh"

namespace pasa::cuda {

// The CTA's shape and shared-memory plan for head dim D. Operand tiles arrive as TMA boxes of
// (rows) x 64 channels, 128 bytes a row with the 128-byte swizzle: the K-major layout of Q and K as
// wgmma's A and B of Q K^T, and the MN-major layout of V as the B of P V.
template <int D>
struct HopperTile {
  // Consumer warpgroups: three at D 64 (192 query rows share each K and V tile; the softmax, whose
  // work per score does not shrink with D, has more warps to hide it), two at D 128 (their S, P and O
  // need ~200 registers a thread).
  static constexpr int kConsumers = D == 64 ? 3 : 2;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = 128;
  static constexpr int kStages = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kBoxes = D / 64;  // 64-channel boxes per row
  static constexpr int kQBoxBytes = kBlockM * 128;
  static constexpr int kQBytes = kBoxes * kQBoxBytes;
  static constexpr int kKVBoxBytes = kBlockN * 128;
  static constexpr int kKVBytes = kBoxes * kKVBoxBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr int kSmemBytes = kVOffset + kStages * kKVBytes + 1024;  // + slack to align the base
  // Registers a thread (setmaxnreg): 24 for the producer, the rest of the SM's 65536 for the consumers
  // (24 x 128 + 240 x 256 = 64512; 24 x 128 + 160 x 384 = 64512).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  static_assert(D == 64 || D == 128, "the Hopper engine's head dims");
};

// The kernel's parameters: the call and a tensor map per operand (tma.h), boxes of kBlockM rows for Q
// and kBlockN rows for K and V.
struct HopperParams {
  CUtensorMap q_map, k_map, v_map;
  FwdParams p;
  TileScheduler tiles;
};

namespace hopper {

template <typename Elem, int N>
__device__ __forceinline__ void mma_qk(float (&s)[N / 2], std::uint64_t q_desc, std::uint64_t k_desc, bool acc) {
  static_assert(N == 128, "key blocks of 128");
  wgmma_m64n128k16_ss<Elem, false>(s, q_desc, k_desc, acc);
}

template <typename Elem, int D>
__device__ __forceinline__ void mma_pv(float (&o)[D / 2], const std::uint32_t (&p)[4], std::uint64_t v_desc,
                                       bool acc) {
  if constexpr (D == 128) {
    wgmma_m64n128k16_rs<Elem, true>(o, p, v_desc, acc);
  } else {
    wgmma_m64n64k16_rs<Elem, true>(o, p, v_desc, acc);
  }
}

}  // namespace hopper

template <class Variant, int D>
__global__ void __launch_bounds__(HopperTile<D>::kThreads, 1)
    attention_fwd_hopper_kernel(const __grid_constant__ HopperParams m) {
  using Tile = HopperTile<D>;
  using Elem = typename Variant::Elem;
  using Softmax = typename Variant::Softmax;
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN;
  constexpr int kQSteps = D / 16;        // k16 steps of Q K^T
  constexpr int kPSteps = kBlockN / 16;  // k16 steps of P V
  constexpr int kNTiles = kBlockN / 8;   // n8 score tiles of a row
  constexpr int kDTiles = D / 8;         // n8 output tiles of a row

  extern __shared__ std::uint8_t hopper_smem[];
  const std::uint32_t base = (smem_addr(hopper_smem) + 1023u) & ~1023u;
  __shared__ TileRing<1> q_ring;
  __shared__ TileRing<Tile::kStages> k_ring, v_ring;
  const FwdParams& p = m.p;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    q_ring.init(Tile::kConsumerWarps);
    k_ring.init(Tile::kConsumerWarps);
    v_ring.init(Tile::kConsumerWarps);
    mbar_fence_init();
  }
  __syncthreads();

  const int n_kb_all = (p.seq_kv + kBlockN - 1) / kBlockN;
  const int warpgroup = tid / 128;
  if (warpgroup == 0) {
    // Producer. Fill i of the K and V rings is key block i of the CTA's sequence of tiles.
    warpgroup_release_registers<Tile::kProducerRegs>();
    if (tid != 0) return;
    int fill = 0;
    for (int t = static_cast<int>(blockIdx.x), n = 0; t < m.tiles.count(); t += static_cast<int>(gridDim.x), ++n) {
      const AttentionTile tile = m.tiles.tile(t);
      const int r0 = tile.m_block * kBlockM, h_kv = tile.h / p.group;
      const int n_kb = visited_key_blocks(p, r0, kBlockM, kBlockN, n_kb_all);
      const std::uint32_t q_bar = q_ring.acquire(n, Tile::kQBytes);
#pragma unroll
      for (int box = 0; box < Tile::kBoxes; ++box) {
        tma_load_4d(base + Tile::kQOffset + box * Tile::kQBoxBytes, &m.q_map, 64 * box, r0, tile.h, tile.b, q_bar);
      }
      for (int j = 0; j < n_kb; ++j, ++fill) {
        const std::uint32_t k_bar = k_ring.acquire(fill, Tile::kKVBytes);
        const std::uint32_t k_slot = base + Tile::kKOffset + k_ring.slot(fill) * Tile::kKVBytes;
#pragma unroll
        for (int box = 0; box < Tile::kBoxes; ++box) {
          tma_load_4d(k_slot + box * Tile::kKVBoxBytes, &m.k_map, 64 * box, j * kBlockN, h_kv, tile.b, k_bar);
        }
        const std::uint32_t v_bar = v_ring.acquire(fill, Tile::kKVBytes);
        const std::uint32_t v_slot = base + Tile::kVOffset + v_ring.slot(fill) * Tile::kKVBytes;
#pragma unroll
        for (int box = 0; box < Tile::kBoxes; ++box) {
          tma_load_4d(v_slot + box * Tile::kKVBoxBytes, &m.v_map, 64 * box, j * kBlockN, h_kv, tile.b, v_bar);
        }
      }
    }
    return;
  }

  // Consumers: warpgroup c owns rows 64 c .. 64 c + 63 of the CTA's block; warp w of it rows
  // 16 w .. 16 w + 15 of those (the wgmma accumulator layout), thread (g, t) rows g and g + 8.
  warpgroup_claim_registers<Tile::kConsumerRegs>();
  const int c = warpgroup - 1, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const std::uint32_t q_tile = base + Tile::kQOffset + c * 64 * 128;  // this warpgroup's 64 rows of each box
  auto q_desc = [&](int kk) { return kmajor_desc<128>(q_tile + (kk / 4) * Tile::kQBoxBytes) + 2 * (kk % 4); };
  auto k_desc = [&](int fill, int kk) {
    return kmajor_desc<128>(base + Tile::kKOffset + k_ring.slot(fill) * Tile::kKVBytes + (kk / 4) * Tile::kKVBoxBytes) +
           2 * (kk % 4);
  };
  auto v_desc = [&](int fill, int kc) {  // 16 keys (2048 bytes) a step
    return mn_major_desc(base + Tile::kVOffset + v_ring.slot(fill) * Tile::kKVBytes, Tile::kKVBoxBytes) + 128 * kc;
  };

  int fill = 0;
  for (int tt = static_cast<int>(blockIdx.x), n = 0; tt < m.tiles.count(); tt += static_cast<int>(gridDim.x), ++n) {
    const AttentionTile tile = m.tiles.tile(tt);
    const int r0 = tile.m_block * kBlockM;
    const int row_lo = r0 + 64 * c + 16 * warp;  // the warp's first row
    const int n_kb = visited_key_blocks(p, r0, kBlockM, kBlockN, n_kb_all);

    Softmax softmax;
    softmax.init();
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float s[kBlockN / 2];  // S of one block: column 8 (i / 4) + 2 t + i % 2 of row g + 8 ((i % 4) / 2)
    std::uint32_t pf[kPSteps][4];  // P of the previous block as the A fragments of P V
    auto& s4 = *reinterpret_cast<float (*)[1][kNTiles][4]>(s);

    // (Each GEMM begins with a wgmma fence: the two GEMMs differ in shape, so the hardware does not
    // order their register accesses by itself, and without it ptxas inserts waits of its own.)
    auto issue_qk = [&](int f) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kQSteps; ++kk) hopper::mma_qk<Elem, kBlockN>(s, q_desc(kk), k_desc(f, kk), kk > 0);
      wgmma_commit();
    };
    auto issue_pv = [&](int f) {
      wgmma_fence();
#pragma unroll
      for (int kc = 0; kc < kPSteps; ++kc) hopper::mma_pv<Elem, D>(o, pf[kc], v_desc(f, kc), true);
      wgmma_commit();
    };
    // The block's scores, masked, through the softmax: P in place (fp32) and O's rescale factors.
    auto softmax_block = [&](int j, float (&rescale)[2]) {
      const int key0 = j * kBlockN;
      if (block_needs_mask(p, key0, kBlockN, row_lo)) apply_mask(s4, p, key0, row_lo + g);
      return softmax.step(s4, p.scale_log2, rescale);
    };
    // P as Elem pairs in the A-fragment layout (once the previous P V has stopped reading pf).
    auto pack_p = [&] {
#pragma unroll
      for (int q = 0; q < kBlockN / 4; ++q) pf[q / 4][q % 4] = pack2<Elem>(s[2 * q], s[2 * q + 1]);
    };

    // O's rescale for block j's new maxima is applied at the next issue point, between the next
    // Q K^T and P_j V_j, so that it runs under Q K^T instead of between the GEMMs.
    float rescale[2];
    bool moved = false;
    auto rescale_o = [&] {
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int n8 = 0; n8 < kDTiles; ++n8)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[4 * n8 + e] *= rescale[e / 2];
      }
    };

    q_ring.wait(n);
    if (n_kb > 0) {
      k_ring.wait(fill);
      issue_qk(fill);
      wgmma_wait<0>();
      wgmma_pin(s);
      if (n_kb == 1) q_ring.release(n);
      k_ring.release(fill);
      softmax_block(0, rescale);  // O is still 0: nothing to rescale (moved stays false)
      pack_p();
    } else {
      q_ring.release(n);
    }
    for (int j = 1; j < n_kb; ++j) {
      const int f = fill + j;
      k_ring.wait(f);
      issue_qk(f);
      rescale_o();
      v_ring.wait(f - 1);
      issue_pv(f - 1);
      wgmma_wait<1>();  // S_j
      wgmma_pin(s);
      if (j == n_kb - 1) q_ring.release(n);
      k_ring.release(f);
      moved = softmax_block(j, rescale);
      wgmma_wait<0>();  // P_{j-1} V_{j-1}
      wgmma_pin(o);
      wgmma_pin(pf);
      v_ring.release(f - 1);
      pack_p();
    }
    if (n_kb > 0) {
      const int f = fill + n_kb - 1;
      rescale_o();
      v_ring.wait(f);
      issue_pv(f);
      wgmma_wait<0>();
      wgmma_pin(o);
      v_ring.release(f);
    }
    fill += n_kb;

    // Epilogue: O = O / l (0 for a row that saw no key), the LSE.
    float row_l[2], lse[2];
    softmax.finish(row_l, lse);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row_lo + g + 8 * i;
      store_lse(p, tile.b, tile.h, row, lse[i]);
      if (row >= p.seq_q) continue;
      const float inv = lse[i] == -INFINITY ? 0.0f : 1.0f / row_l[i];
      char* out = output_row(p, tile.b, tile.h, row);
#pragma unroll
      for (int n8 = 0; n8 < kDTiles; ++n8) {
        store_pair(out, p.o_type, 8 * n8 + 2 * t, o[4 * n8 + 2 * i] * inv, o[4 * n8 + 2 * i + 1] * inv);
      }
    }
  }
}

}  // namespace pasa::cuda
