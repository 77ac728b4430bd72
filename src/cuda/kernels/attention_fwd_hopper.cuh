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
// - Two or three consumer warpgroups share every K and V tile; while one computes its softmax the
//   others' GEMMs keep the tensor cores busy, and each mainloop overlaps its own GEMMs with its
//   softmax as well (the variants' headers say how).
// - Both GEMMs on wgmma: S from Q and K in shared memory (ss), O from P in registers and V in
//   shared memory (rs, V MN-major as it lies in memory).
// - Persistent CTAs (one per SM), each drawing its next tile from a counter when it is free, causal
//   tiles longest first (tile_scheduler.cuh). The producer draws; the tile's number reaches the
//   consumers beside its Q fill.
// - The epilogue: each consumer warpgroup writes its rows of O into an output stage in shared memory
//   and one of its threads copies the stage to O (a TMA store) while the warpgroup goes on to its next
//   tile. A tile that opts out or has no room for the stages (HopperTile's kOStage, kOStaged), or an O
//   the copies cannot take (fp32, or strides the driver cannot map), gets each thread's pairs stored
//   directly (HopperConsumer::store_rows). A variant short of shared memory may lend the stages the
//   end of its own where nothing else uses it (OStage::in_extra).
//
// What is written once here: the warp roles and register split, the producer, the rings, the
// scheduler, the tile loop and the consumer context (the descriptors of this warpgroup's Q rows and
// of the K and V slots). What a policy brings, as a Variant type:
//   Tile<D>            the CTA shape (HopperTile: consumers, slot sizes, ring depth, extra shared
//                      memory);
//   wait_key_block(...)  what the producer waits for before it announces a key block's copies
//                      (default: nothing; pasa: the block's prepass stage, written in this kernel);
//   load_k(...)        how the producer fills a K slot (TMA of K, or a bulk copy of a prepass tile);
//   load_v(...)        likewise a V slot (HopperVariantDefaults: TMA of V);
//   prepare_smem(...)  what the consumers write into the extra shared memory once (default: nothing);
//   spare_producer_warp(...)  what the producer warpgroup's three other warps do, with the extra
//                      shared memory at hand (default: nothing; pasa: its prepass, whose stages
//                      wait_key_block waits for);
//   Mainloop<Tile>     one tile's key blocks (GEMM order, softmax and its rounding points, the
//                      epilogue with the LSE), on the context's rings.
// The exact policy's are in hopper_exact_mainloop.cuh, pasa's in hopper_pasa_mainloop.cuh, sage8's
// in hopper_sage8_mainloop.cuh.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/arch/cuda_check.h"
#include "cuda/arch/mbarrier.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/arch/warpgroup.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/arch/wgmma_16bit.cuh"
#include "cuda/arch/wgmma_f16acc.cuh"
#include "cuda/block/epilogue.cuh"
#include "cuda/block/fwd_mask.cuh"
#include "cuda/block/pasa_prepass.cuh"
#include "cuda/host/kernel_params.h"
#include "cuda/host/once_per_device.h"
#include "cuda/host/tma.h"
#include "cuda/pipeline/tile_ring.cuh"
#include "cuda/pipeline/launch_counter.cuh"
#include "cuda/pipeline/tile_scheduler.cuh"
#include "pasa/error.h"

namespace pasa::cuda {

// The CTA's shape and shared-memory plan. Q arrives by TMA as boxes of kBlockM rows x 64 channels,
// 128 bytes a row with the 128-byte swizzle: the K-major layout of wgmma's A. A K and a V slot hold
// kKSlotBytes and kVSlotBytes; for the 16-bit variants (the defaults) boxes of 128 rows x 64 channels
// like Q's, K-major K as the B of Q K^T and MN-major V as the B of P V, where a variant may append
// rows of its own to each K box; an 8-bit variant brings its own tiles. kExtraBytes: a variant's own
// shared memory; kStages: the depth of the K and V rings; kOStage: where the epilogue's output stages
// (store_rows) live, if anywhere.
enum class OStage {
  none,      // O stored directly by each thread
  own,       // stages of their own after the V ring, where the shared memory has room
  in_extra,  // the end of the variant's extra shared memory, which its spare producer warps leave idle
};
template <int D, int kConsumers_, int kExtraBytes = 0, int kKSlotBytes = 2 * 128 * D, int kVSlotBytes = 2 * 128 * D,
          int kStages_ = 2, OStage kOStage_ = OStage::own>
struct HopperTile {
  static constexpr int kHeadDim = D;
  static constexpr int kConsumers = kConsumers_;  // consumer warpgroups of 64 query rows
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = 128;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kBoxes = D / 64;  // 64-channel boxes per row
  static constexpr int kQBoxBytes = kBlockM * 128;
  static constexpr int kQBytes = kBoxes * kQBoxBytes;
  static constexpr int kKBytes = kKSlotBytes;
  static constexpr int kKBoxBytes = kKBytes / kBoxes;
  static constexpr int kVBytes = kVSlotBytes;
  static constexpr int kVBoxBytes = kVBytes / kBoxes;
  // Each consumer warpgroup's output stage, where the shared memory has room for it: its 64 rows in
  // boxes of 64 channels as a Q box lies (the 128-byte swizzle), which a bulk tensor copy writes to O.
  static constexpr int kOBoxBytes = 64 * 128;
  static constexpr int kBytesWithoutStages = kQBytes + kStages * (kKBytes + kVBytes) + kExtraBytes + 1024;
  static constexpr OStage kOStage = kOStage_;
  static constexpr bool kOStaged =
      kOStage == OStage::own ? kBytesWithoutStages + kConsumers * kBoxes * kOBoxBytes <= 227 * 1024
                             : kOStage == OStage::in_extra;
  static constexpr int kOStageBytes = kOStaged ? kBoxes * kOBoxBytes : 0;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKBytes;
  static constexpr int kRingEnd = kVOffset + kStages * kVBytes;
  static constexpr int kExtraOffset = kRingEnd + (kOStage == OStage::own ? kConsumers * kOStageBytes : 0);
  static constexpr int kOOffset =
      kOStage == OStage::in_extra ? kExtraOffset + kExtraBytes - kConsumers * kOStageBytes : kRingEnd;
  static constexpr int kExtra = kExtraBytes;
  static constexpr int kSmemBytes = kExtraOffset + kExtraBytes + 1024;  // + slack to align the base
  // Bytes of K and V slots a key: what the causal scheduler's L2 sections count.
  static constexpr int kKvBytesPerKey = (kKBytes + kVBytes) / kBlockN;
  // Registers a thread (setmaxnreg): 24 for the producer, the rest of the SM's 65536 for the consumers
  // (24 x 128 + 240 x 256 = 64512; 24 x 128 + 160 x 384 = 64512).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  static_assert(D == 64 || D == 128, "the Hopper engine's head dims");
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static_assert(kKBoxBytes % 1024 == 0 && kVBoxBytes % 1024 == 0, "slots on 1024-byte boundaries (the swizzle's period)");
  static_assert(kSmemBytes <= 227 * 1024, "an SM's shared memory");
  static_assert(kOStage != OStage::in_extra || (kExtraBytes >= kConsumers * kOStageBytes && kOOffset % 1024 == 0),
                "output stages lent by the variant fit in its extra shared memory, on the swizzle's period");
};

// A quantizing variant's prepass outputs beside its tiles (sage8's scales; unused by the others).
struct QuantScales {
  const float* k_scale = nullptr;  // [B, H_kv, key blocks, 8]: INT8 K's scale per key group
  const float* k_mean = nullptr;   // [B, H_kv, D]: smooth K's mean (the LSE's correction)
  const float* v_scale = nullptr;  // [B, H_kv, D]: FP8 V's scale per channel
  float alpha = 0.0f;              // the softmax scale as given
};

// The kernel's parameters: the call, a tensor map per operand (tma.h; boxes of kBlockM rows for Q,
// kBlockN rows for K and V), and, for a variant whose K (and V) come from a prepass, its tiles.
struct HopperParams {
  CUtensorMap q_map, k_map, v_map;
  FwdParams p;
  TileScheduler tiles;
  const std::uint8_t* k_tiles;  // [B, H_kv, key blocks] tiles of the variant's (null: K by TMA)
  int heads_kv;
  QuantScales quant;
  PasaPrepass pasa;  // the pasa variants' prepass, run by the producer's spare warps (unused by the others)
  std::uint64_t* tile_tickets;  // the grid's tile counter (draw_tile): 8 bytes of the call's workspace
  // O as boxes of 64 rows (launch_hopper): with o_by_tma the epilogue stages each warpgroup's rows in
  // shared memory and one bulk tensor copy writes them; without (a tile without stages, an fp32 O,
  // or strides the driver cannot map), each thread stores its pairs.
  CUtensorMap o_map;
  bool o_by_tma;
};

// What a consumer warpgroup's mainloop sees of one tile: who it is, its rows, the key blocks, the
// rings (fill i of the K and V rings is the CTA's i-th key block, counted over its life) and the
// shared-memory descriptors.
template <class Tile>
struct HopperConsumer {
  const HopperParams& m;
  const FwdParams& p;
  AttentionTile tile;
  int c, warp, g, t;  // warpgroup (0-based among the consumers), warp in it, lane / 4, lane % 4
  int row_lo;         // the warp's first row (warp w: rows 16 w .. 16 w + 15 of the warpgroup's 64)
  int kb_first;       // the tile's first key block (a sliding window starts past 0)
  int n_kb;           // key blocks of the tile, from kb_first
  int fill;           // the ring fill of its first key block
  int q_fill;         // the Q ring's fill of the tile
  std::uint32_t base;
  TileRing<1>& q_ring;
  TileRing<Tile::kStages>& k_ring;
  TileRing<Tile::kStages>& v_ring;

  // Shared addresses: the K and V slots of ring fill f.
  __device__ __forceinline__ std::uint32_t k_slot(int f) const { return base + Tile::kKOffset + k_ring.slot(f) * Tile::kKBytes; }
  __device__ __forceinline__ std::uint32_t v_slot(int f) const { return base + Tile::kVOffset + v_ring.slot(f) * Tile::kVBytes; }

  // A K-major descriptor of this warpgroup's 64 rows of Q at k16 step kk.
  __device__ __forceinline__ std::uint64_t q_desc(int kk) const {
    return kmajor_desc<128>(base + Tile::kQOffset + c * 64 * 128 + (kk / 4) * Tile::kQBoxBytes) + 2 * (kk % 4);
  }
  // The 16-bit K slot of ring fill f, at k16 step kk.
  __device__ __forceinline__ std::uint64_t k_desc(int f, int kk) const {
    return kmajor_desc<128>(k_slot(f) + (kk / 4) * Tile::kKBoxBytes) + 2 * (kk % 4);
  }
  // The 16-bit V slot of ring fill f as the MN-major B of P V, at k16 step kc (16 keys, 2048 bytes).
  __device__ __forceinline__ std::uint64_t v_desc(int f, int kc) const {
    return mn_major_desc(v_slot(f), Tile::kVBoxBytes) + 128 * kc;
  }
  __device__ __forceinline__ std::uint32_t extra() const { return base + Tile::kExtraOffset; }

  // The epilogue of the thread's two rows (g, g + 8 of its warp): the LSE, and the output row
  // O = pair(n8, i) / l * scale(n8) in the output type (0 for a row that saw no key: its LSE is -inf),
  // taken there as `rounding` says. pair(n8, i) gives the thread's two adjacent O~ values of n8 tile n8
  // of row i, scale(n8) their columns' factors (sage8's V scales: applied after the division, which
  // keeps O~ / l within V's range where O~ times the scale could pass fp32's).
  template <class Pair, class Scale = UnitColumns>
  __device__ __forceinline__ void store_rows(const float (&row_l)[2], const float (&lse)[2], Pair pair,
                                             OutRounding rounding = OutRounding::direct, Scale scale = {}) const {
    if constexpr (Tile::kOStaged) {
      if (m.o_by_tma) {
        store_rows_staged(row_l, lse, pair, rounding, scale);
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row_lo + g + 8 * i;
      store_lse(p, tile.b, tile.h, row, lse[i]);
      if (row >= p.seq_q) continue;
      const float inv = lse[i] == -INFINITY ? 0.0f : 1.0f / row_l[i];
      char* out = output_row(p, tile.b, tile.h, row);
#pragma unroll
      for (int n8 = 0; n8 < Tile::kHeadDim / 8; ++n8) {
        const float2 x = scaled(pair(n8, i), inv, scale, n8);
        store_pair(out, p.o_type, 8 * n8 + 2 * t, output_value(x.x, rounding), output_value(x.y, rounding),
                   rounding == OutRounding::saturate);
      }
    }
  }

  // store_rows through the warpgroup's output stage (a 16-bit O that the launch could map).
  template <class Pair, class Scale>
  __device__ __forceinline__ void store_rows_staged(const float (&row_l)[2], const float (&lse)[2], Pair pair,
                                                    OutRounding rounding, Scale scale) const {
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      store_lse(p, tile.b, tile.h, row_lo + g + 8 * i, lse[i]);
      inv[i] = lse[i] == -INFINITY ? 0.0f : 1.0f / row_l[i];
    }
    auto value = [&](int n8, int i) {
      const float2 x = scaled(pair(n8, i), inv[i], scale, n8);
      return make_float2(output_value(x.x, rounding), output_value(x.y, rounding));
    };
    // The warpgroup's rows into its output stage, then one thread copies the stage's boxes to O (rows
    // past the sequence are not written) while the warpgroup goes on to its next tile. The stage is
    // written again only after the previous tile's copies have read it.
    const std::uint32_t stage = base + Tile::kOOffset + c * Tile::kOStageBytes;
    const bool issuer = warp == 0 && g == 0 && t == 0;
    if (issuer) bulk_wait_group_all();
    named_barrier_sync(2 + c, 128);
    auto put_pairs = [&](auto to_bits) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // Row 16 warp + g + 8 i of the warpgroup's 64, whose 16-byte chunk n8 % 8 the swizzle puts at
        // chunk (n8 % 8) ^ g: the row's address with chunk g, XORed with the constant n8 % 8.
        const std::uint32_t row_addr = stage + (16 * warp + g + 8 * i) * 128 + 16 * g + 4 * t;
#pragma unroll
        for (int n8 = 0; n8 < Tile::kHeadDim / 8; ++n8) {
          const std::uint32_t addr = ((row_addr + (n8 / 8) * Tile::kOBoxBytes) ^ ((n8 % 8) << 4));
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(to_bits(value(n8, i))) : "memory");
        }
      }
    };
    const bool saturate = rounding == OutRounding::saturate;
    if (p.o_type == ElemType::bf16) {
      put_pairs([&](float2 v) { return pack_output<__nv_bfloat16>(v.x, v.y, saturate); });
    } else {
      put_pairs([&](float2 v) { return pack_output<__half>(v.x, v.y, saturate); });
    }
    fence_proxy_async_shared();
    named_barrier_sync(2 + c, 128);
    if (issuer) {
#pragma unroll
      for (int box = 0; box < Tile::kBoxes; ++box) {
        tma_store_4d(&m.o_map, 64 * box, row_lo - 16 * warp, tile.h, tile.b, stage + box * Tile::kOBoxBytes);
      }
      bulk_commit_group();
    }
  }
};

// What a variant inherits unless it brings its own: nothing to wait for before a key block, V by TMA
// from V as given, and no shared memory of its own to prepare.
struct HopperVariantDefaults {
  template <class Tile>
  __device__ __forceinline__ static void wait_key_block(const HopperParams&, int /*b*/, int /*h_kv*/, int /*j*/,
                                                        int /*n_kb_all*/) {}
  template <class Tile>
  __device__ __forceinline__ static void load_v(const HopperParams& m, std::uint32_t slot, std::uint32_t bar, int b,
                                                int h_kv, int j, int /*n_kb_all*/) {
#pragma unroll
    for (int box = 0; box < Tile::kBoxes; ++box) {
      tma_load_4d(slot + box * Tile::kVBoxBytes, &m.v_map, 64 * box, j * Tile::kBlockN, h_kv, b, bar);
    }
  }
  __device__ __forceinline__ static void prepare_smem(std::uint32_t, int, int) {}
  template <class Tile>
  __device__ __forceinline__ static void spare_producer_warp(const HopperParams&, std::uint8_t* /*extra*/,
                                                             int /*spare_warp*/, int /*lane*/) {}
};

namespace hopper {

template <typename Elem, int D>
__device__ __forceinline__ void mma_pv(float (&o)[D / 2], const std::uint32_t (&p)[4], std::uint64_t v_desc,
                                       bool acc) {
  if constexpr (D == 128) {
    wgmma_m64n128k16_rs<Elem, true>(o, p, v_desc, acc);
  } else {
    wgmma_m64n64k16_rs<Elem, true>(o, p, v_desc, acc);
  }
}

// P V of one k16 step added onto fp16 accumulators (pasa_fp16acc): p as mma_pv's, o as
// wgmma_f16acc.cuh's pairs.
template <int D>
__device__ __forceinline__ void mma_pv_fp16_acc(std::uint32_t (&o)[D / 4], const std::uint32_t (&p)[4],
                                                std::uint64_t v_desc) {
  if constexpr (D == 128) {
    wgmma_f16acc_m64n128k16_rs<true>(o, p, v_desc, true);
  } else {
    wgmma_f16acc_m64n64k16_rs<true>(o, p, v_desc, true);
  }
}

}  // namespace hopper

template <class Variant, int D>
__global__ void __launch_bounds__(Variant::template Tile<D>::kThreads, 1)
    attention_fwd_hopper_kernel(const __grid_constant__ HopperParams m) {
  using Tile = typename Variant::template Tile<D>;
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN;

  extern __shared__ std::uint8_t hopper_smem[];
  const std::uint32_t base = (smem_addr(hopper_smem) + 1023u) & ~1023u;
  __shared__ TileRing<1> q_ring;
  __shared__ int tile_of_q;  // the tile whose Q the Q slot holds (-1: none left), written with each Q fill
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
  // Broadcast from lane 0 so that ptxas knows them warp-uniform: what is computed from them (the
  // shared-memory descriptors of wgmma) then stays in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (warpgroup == 0) {
    // Producer: one thread; the warpgroup's other warps do the variant's work beside it, if any.
    warpgroup_release_registers<Tile::kProducerRegs>();
    if (tid >= 32) {
      std::uint8_t* extra = hopper_smem + (base - smem_addr(hopper_smem)) + Tile::kExtraOffset;
      Variant::template spare_producer_warp<Tile>(m, extra, tid / 32 - 1, tid % 32);
      return;
    }
    if (tid != 0) return;
    // Per tile: Q with the tile's number beside it for the consumers, then K and V, then the next
    // tile's number drawn (its atomic's round trip mostly spent waiting for the consumers to free the
    // Q slot anyway).
    int fill = 0, n = 0;
    claim_launch_counter(m.tile_tickets);
    for (int t = static_cast<int>(blockIdx.x); t < m.tiles.count(); ++n) {
      const AttentionTile tile = m.tiles.tile(t);
      const int r0 = tile.m_block * kBlockM, h_kv = tile.h / p.group;
      const int kb_first = first_key_block(p, r0, kBlockN);
      const int kb_end = visited_key_blocks(p, r0, kBlockM, kBlockN, n_kb_all);
      q_ring.wait_free(n);
      tile_of_q = t;
      const std::uint32_t q_bar = q_ring.announce(n, Tile::kQBytes);
#pragma unroll
      for (int box = 0; box < Tile::kBoxes; ++box) {
        tma_load_4d(base + Tile::kQOffset + box * Tile::kQBoxBytes, &m.q_map, 64 * box, r0, tile.h, tile.b, q_bar);
      }
      for (int j = kb_first; j < kb_end; ++j, ++fill) {
        // Before the K ring's arrival: the consumers' wait on it then orders what the producer has
        // seen (a prepass stage published) before their reads.
        Variant::template wait_key_block<Tile>(m, tile.b, h_kv, j, n_kb_all);
        const std::uint32_t k_bar = k_ring.acquire(fill, Tile::kKBytes);
        Variant::template load_k<Tile>(m, base + Tile::kKOffset + k_ring.slot(fill) * Tile::kKBytes, k_bar, tile.b,
                                       h_kv, j, n_kb_all);
        const std::uint32_t v_bar = v_ring.acquire(fill, Tile::kVBytes);
        Variant::template load_v<Tile>(m, base + Tile::kVOffset + v_ring.slot(fill) * Tile::kVBytes, v_bar, tile.b,
                                       h_kv, j, n_kb_all);
      }
      t = draw_tile(m.tile_tickets, m.tiles.count());
    }
    q_ring.wait_free(n);  // no tiles left: an empty Q fill that says so
    tile_of_q = -1;
    q_ring.announce(n, 0);
    return;
  }

  // Consumers.
  warpgroup_claim_registers<Tile::kConsumerRegs>();
  const int c = warpgroup - 1, warp = __shfl_sync(0xffffffffu, (tid / 32) % 4, 0), lane = tid % 32;
  if constexpr (Tile::kExtra > 0) {
    Variant::prepare_smem(base + Tile::kExtraOffset, tid - 128, 128 * Tile::kConsumers);
    fence_proxy_async_shared();
    named_barrier_sync(1, 128 * Tile::kConsumers);
  }
  typename Variant::template Mainloop<Tile> mainloop;
  int fill = 0;
  for (int n = 0;; ++n) {
    q_ring.wait(n);
    // Read by the lane that later releases this warp's hold on the Q fill (after which the producer
    // may write the next number), and passed to the others.
    const int tt = __shfl_sync(0xffffffffu, lane == 0 ? *static_cast<volatile int*>(&tile_of_q) : 0, 0);
    if (tt < 0) break;
    const AttentionTile tile = m.tiles.tile(tt);
    const int r0 = tile.m_block * kBlockM;
    const int kb_first = first_key_block(p, r0, kBlockN);
    const int n_kb = max(0, visited_key_blocks(p, r0, kBlockM, kBlockN, n_kb_all) - kb_first);
    HopperConsumer<Tile> ctx{m, p, tile, c, warp, lane / 4, lane % 4, r0 + 64 * c + 16 * warp, kb_first, n_kb, fill, n,
                             base, q_ring, k_ring, v_ring};
    mainloop.run_tile(ctx);  // releases the Q slot after its last Q K^T
    fill += n_kb;
  }
  // The shared memory of the last output copies stays until they have completed (store_rows' issuer).
  if constexpr (Tile::kOStaged) {
    if (m.o_by_tma && tid % 128 == 0) bulk_wait_group_all<true>();
  }
}

// Host side, shared by the variants' launchers: the tile order of a call (causal sections of as
// many (batch, head) pairs as have their K and V in half the L2, tile_scheduler.cuh).
template <class Tile>
TileScheduler hopper_schedule(const KernelRequest& r) {
  const FwdParams& p = r.fwd;
  const int m_blocks = (p.seq_q + Tile::kBlockM - 1) / Tile::kBlockM;
  const long long kv_bytes = static_cast<long long>(Tile::kKvBytesPerKey) * p.seq_kv;
  // (at most every (batch, head) pair: section_heads x m_blocks is then at most the tile count, an int)
  const long long pairs = std::min(static_cast<long long>(p.heads_q) * r.batch, 1LL << 20);
  const auto section = std::clamp<long long>(r.l2_bytes / 2 / std::max(kv_bytes, 1LL), 1, std::max(pairs, 1LL));
  return {m_blocks, p.heads_q, r.batch, p.causal, static_cast<int>(section)};
}

// The persistent grid: min(tiles, SMs) CTAs.
inline int hopper_grid(const TileScheduler& s, const KernelRequest& r) {
  const long long tiles = static_cast<long long>(s.m_blocks) * s.heads * s.batch;
  return static_cast<int>(std::min<long long>(tiles, r.sm_count));
}

// The persistent launch: hopper_grid's CTAs drawing tiles from the call's ticket word; the
// shared-memory attribute set once per device.
template <class Variant, int D>
void launch_hopper(HopperParams m, const KernelRequest& r, cudaStream_t stream, const char* name) {
  using Tile = typename Variant::template Tile<D>;
  static OncePerDevice configured;
  auto* kernel = attention_fwd_hopper_kernel<Variant, D>;
  configured([&] { set_shared_memory(kernel, Tile::kSmemBytes, false, name); });
  const int grid = hopper_grid(m.tiles, r);
  if (grid == 0) return;
  if (r.tile_tickets == nullptr) throw Error(std::string(name) + ": no workspace for the tile counter");
  m.tile_tickets = r.tile_tickets;
  const FwdParams& p = m.p;
  const Operand o{p.o, p.o_stride_b, p.o_stride_h, p.o_stride_s};
  m.o_by_tma = Tile::kOStaged && p.o_type != ElemType::f32 && row_tile_mappable(o);
  if (m.o_by_tma) {
    // A layout the driver refuses after all takes the direct stores: a variant's prepass may already
    // be queued, so nothing about O may fail this launch.
    try {
      m.o_map = fp16_row_tile_map(o, r.batch, p.heads_q, p.seq_q, D, 64, "o");
    } catch (const Error&) {
      m.o_by_tma = false;
    }
  }
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(m);
  check_launch(name);
}

}  // namespace pasa::cuda
