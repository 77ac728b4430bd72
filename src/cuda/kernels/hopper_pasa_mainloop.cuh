// SPDX-License-Identifier: Apache-2.0
// The pasa and pasa_accurate policies on the Hopper engine (attention_fwd_hopper.cuh): PASA's
// Algorithm 1 (docs/algorithms.md section 3) at the emulator's rounding points (PasaSoftmax,
// online_softmax.cuh).
//
// Its K slots hold the prepass's K' tiles (pasa_stage.cuh: 128 keys, then 8 rows of the block's
// mean K' row, hi and lo), filled by one bulk copy; Q and V (fp16) by TMA. The prepass
// (pasa_prepass.cuh) runs in this kernel, on the producer warpgroup's three spare warps, which draw
// 64-channel chunks of the key blocks in the order the tiles need them; the producer waits for a
// block's stage (and, for bf16 inputs, its fp16 V rows) before it copies them. (Where each stage
// serves few tiles, the launcher runs the prepass as a kernel of its own before this one instead,
// and there is nothing to wait for.) bf16 Q is rounded to fp16 in shared memory by the warpgroup
// that owns its rows, once per tile. Per key block:
//   S' = Q K'^T by one m64n136k16 wgmma chain: the 128 scores, and in the 8 extra columns each row's
//     sum of S' over the block (for the local pseudo-average, from the mean rows: about 22 bits);
//   S' rounded to fp16 pairs (pasa) or kept in fp32 (pasa_accurate), masked, the block max; then per
//     k16 step P = fl(e^(fl(S' - m))) sent at once to the tensor cores: P V into a fresh fp32 sum, and
//     P times a matrix of ones (in the extra shared memory) for the row sums of P;
//   the next block's S' issued behind P V, and while it runs PASA's state update (m and the two
//     rescale factors: its headroom's O~ rule weighs the block by those row sums and its largest |V|,
//     the prepass's slots), l, and O~ = fl(fl(ep O~) + fl(ec fl(P V))) in fp16 (a block of large V:
//     fl(P V) at a power of two below it, pasa_headroom.h).
// Epilogue: O = fl(O~ (1 / l)), LSE = m + log l.
//
// pasa_fp16acc (kFp16Acc) keeps P V in the tensor cores' fp16 accumulators over kPasaPvBlocks key
// blocks (its preset's pv_blocks): P is scaled to the running maximum, P = fl(P e_cur), once the state
// update beside the exponentials has its factors (its O~ rule weighs a block by its key count); O~ and
// the accumulator are rescaled by e_prev (where a row of the warp moved); P V and the row sums of P go
// into fp16 accumulators; and every kPasaPvBlocks-th block (by its index from the first key) and the
// tile's last, O~ = fl(O~ + acc) and the accumulator starts again at 0. No fp32 P V and no O~ update
// for the other blocks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/arch/mbarrier.cuh"
#include "cuda/arch/warpgroup.cuh"
#include "cuda/arch/wgmma_f16acc.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/block/pasa_stage.cuh"
#include "cuda/kernels/attention_fwd_hopper.cuh"

namespace pasa::cuda {

// Rounds this warpgroup's rows of a bf16 Q tile to fp16 in place (an element-wise map, so the
// swizzle does not matter), then makes them visible to the warpgroup's wgmma.
template <class Tile>
__device__ __forceinline__ void round_q_rows_to_fp16(const HopperConsumer<Tile>& ctx) {
  constexpr int kChunks = Tile::kBoxes * 64 * 8;  // 16-byte chunks of the warpgroup's rows
  const int thread = static_cast<int>(threadIdx.x) % 128;
#pragma unroll
  for (int i = thread; i < kChunks; i += 128) {
    const int box = i / (64 * 8), in_box = i % (64 * 8);
    const std::uint32_t addr = ctx.base + Tile::kQOffset + box * Tile::kQBoxBytes + ctx.c * 64 * 128 + in_box * 16;
    std::uint32_t w[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(addr));
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = bf16x2_to_half2(w[e]);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  }
  fence_proxy_async_shared();
  named_barrier_sync(2 + ctx.c, 128);  // (barrier 1 is the consumers' start-up barrier)
}

// QElem: the input type (Q is read as given, bf16 rounded on chip). kAccurate: the pasa_accurate
// policy (S' and the softmax state in fp32). kMayPrepass: the spare warps run the prepass where the
// launch asks for it (PasaPrepass::ready set); without, the launch has run it as a kernel of its own.
// kFp16Acc: the pasa_fp16acc policy (P V in fp16 accumulators; not with kAccurate). kConsumers64: the
// consumer warpgroups at D 64 (below).
template <typename QElem, bool kAccurate, bool kMayPrepass = true, bool kFp16Acc = false, int kConsumers64 = 2>
struct PasaHopperVariant : HopperVariantDefaults {
  static_assert(!(kAccurate && kFp16Acc), "pasa_fp16acc keeps pasa's fp16 state");
  static_assert(kConsumers64 == 2 || (kConsumers64 == 3 && !kAccurate), "three warpgroups: pasa and pasa_fp16acc");
  static constexpr int kOnesBytes = 1024;  // the all-ones fp16 B tile of the P row sums
  static constexpr int kSpareWarps = 3;    // the producer warpgroup's warps that run the prepass
  static constexpr int kStagingBytes = kSpareWarps * kPasaChunkStagingBytes;
  // The extra shared memory: the ones, then each spare warp's staging buffer.
  static constexpr int kExtraBytes = kOnesBytes + kStagingBytes;

  // Two consumer warpgroups at both head dims: S' (68), P (32), P V (D / 2) and O~ (D / 4) registers.
  // At D 64, pasa's and pasa_fp16acc's consumers also fit three warpgroups' 160 registers (pasa with
  // kQkAtBlockStart): 192 query rows share each K' and V tile (the launcher chooses).
  // At D 128 the output stages would not fit beside the rest (214 KiB): they take the idle staging
  // buffers of a kernel without the prepass, and a kernel with it stores directly (compiled with both
  // paths, its direct stores measured 0.88-0.95x at 4k and 16k, bench/NOTES.md).
  template <int D>
  using Tile = HopperTile<D, D == 64 ? kConsumers64 : 2, kExtraBytes, PasaStage<D>::kKBytes, 2 * 128 * D, 2,
                          D == 64 ? OStage::own : (kMayPrepass ? OStage::none : OStage::in_extra)>;

  // The prepass stage of key block j of (b, h_kv).
  __device__ __forceinline__ static int stage_of(const HopperParams& m, int b, int h_kv, int j, int n_kb_all) {
    return (b * m.heads_kv + h_kv) * n_kb_all + j;
  }

  // The key block's stage (its K' tile, largest |V| and, for bf16 inputs, fp16 V rows), where this
  // kernel's spare warps write it.
  template <class Tile>
  __device__ __forceinline__ static void wait_key_block(const HopperParams& m, int b, int h_kv, int j, int n_kb_all) {
    if (kMayPrepass && m.pasa.ready != nullptr) wait_pasa_stage<Tile::kHeadDim>(m.pasa, stage_of(m, b, h_kv, j, n_kb_all));
  }

  template <class Tile>
  __device__ __forceinline__ static void load_k(const HopperParams& m, std::uint32_t slot, std::uint32_t bar, int b,
                                                int h_kv, int j, int n_kb_all) {
    const std::int64_t stage = stage_of(m, b, h_kv, j, n_kb_all);
    bulk_copy_to_shared(slot, m.k_tiles + stage * Tile::kKBytes, Tile::kKBytes, bar);
  }

  template <class Tile>
  __device__ __forceinline__ static void spare_producer_warp(const HopperParams& m, std::uint8_t* extra, int spare_warp,
                                                             int lane) {
    if (!kMayPrepass || m.pasa.ready == nullptr) return;
    run_pasa_prepass<Tile::kHeadDim, QElem>(m.pasa, lane, extra + kOnesBytes + spare_warp * kPasaChunkStagingBytes);
  }

  // The matrix of ones (fp16 1.0 = 0x3C00). (The staging buffers are the spare warps', or the output
  // stages' (OStage::in_extra).)
  __device__ __forceinline__ static void prepare_smem(std::uint32_t extra, int thread, int threads) {
    for (int i = thread; i < kOnesBytes / 4; i += threads) {
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(extra + 4 * i), "r"(kOnesHalf2) : "memory");
    }
  }

  template <class Tile>
  struct Mainloop {
    static constexpr int D = Tile::kHeadDim;
    static constexpr int kKeys = Tile::kBlockN;
    static constexpr int kQSteps = D / 16;       // k16 steps of Q K'^T
    static constexpr int kPSteps = kKeys / 16;   // k16 steps of P V
    static constexpr int kDT = D / 8;            // n8 tiles of O
    static constexpr int kSAcc = (kKeys + 8) / 2;  // S' accumulators a thread: 32 pairs, then the sums
    static_assert(Tile::kKBytes == PasaStage<D>::kKBytes, "a K slot is one prepass stage");
    using Softmax = PasaSoftmax<1, !kAccurate, pasa_base2(kAccurate)>;
    // pasa's three warpgroups (160 registers a thread) issue each block's S' at the block's start and
    // wait for it there, instead of behind the previous block's P V: with the next S' (68) in flight
    // beside P V's sums, P and O~, ptxas runs short of registers and serializes every wgmma. The
    // other warpgroups' GEMMs fill the tensor cores meanwhile. (pasa_fp16acc's fp16 sums leave room.)
    static constexpr bool kQkAtBlockStart = Tile::kConsumers == 3 && !kFp16Acc;

    __device__ __forceinline__ void run_tile(HopperConsumer<Tile>& ctx) {
      const FwdParams& p = ctx.p;
      const int n_kb = ctx.n_kb, fill = ctx.fill;
      Softmax softmax;
      softmax.init();
      __half2 o[kDT][2];  // O~ in fp16: tile n's pair of row g (i = 0) and of row g + 8 (i = 1)
#pragma unroll
      for (int n = 0; n < kDT; ++n) o[n][0] = o[n][1] = __float2half2_rn(0.0f);
      float acc[kSAcc];  // S' of one block (column 8 (i / 4) + 2 t + i % 2 of row g + 8 ((i % 4) / 2))
      // One block's P V in fp32, or (kFp16Acc) the fp16 accumulator of up to kPasaPvBlocks blocks' (pair
      // 2 n + i: tile n of row g + 8 i, as o[n][i]).
      std::conditional_t<kFp16Acc, std::uint32_t[D / 4], float[D / 2]> pv;
      if constexpr (kFp16Acc) {
#pragma unroll
        for (int i = 0; i < D / 4; ++i) pv[i] = 0u;
      }
      // P times ones: row g in [0], [1], row g + 8 in [2], [3]; or (kFp16Acc) in fp16, row g in [0], g + 8 in [1].
      std::conditional_t<kFp16Acc, std::uint32_t[2], float[4]> psum_acc;
      std::uint32_t pa[1][kPSteps][4];  // S', then P, as the P V A fragments
      const std::uint64_t ones_desc = plain_desc(ctx.extra());
      // The largest |V| of each key block (the prepass's slots, pasa_stage.cuh), read once its stage is
      // in (the K ring's wait) and a block ahead of its use: v_blk is the next block's to run.
      const int stage0 = stage_of(ctx.m, ctx.tile.b, ctx.tile.h / p.group, ctx.kb_first, ctx.m.pasa.n_kb);
      const auto v_max_of = [&](int kb) { return ctx.m.pasa.template v_max_of<PasaStage<D>::kKAtoms>(stage0 + kb); };
      float v_blk = 0.0f;
      if constexpr (std::is_same_v<QElem, __nv_bfloat16>) round_q_rows_to_fp16(ctx);

      auto issue_qk = [&](int f) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kQSteps; ++kk) wgmma_m64n136k16_ss<__half, false>(acc, ctx.q_desc(kk), ctx.k_desc(f, kk), kk > 0);
        wgmma_commit();
      };

      // Block kb with its S' in acc: the softmax, PASA's state update and P V, then (kHasNext) the next
      // block's S' issued behind P V, so the tensor cores go on while l and O~ take in this block's P V.
      // (Two instantiations, so that no wgmma is issued under a run-time condition, which makes ptxas
      // serialize them.)
      const PartialBlocks partial(p, ctx.row_lo);
      auto run_block = [&](int kb, auto has_next) {
        constexpr bool kHasNext = decltype(has_next)::value;
        const int f = fill + kb, key0 = (ctx.kb_first + kb) * kKeys;
        if constexpr (kQkAtBlockStart) {
          ctx.k_ring.wait(f);
          issue_qk(f);
          v_blk = v_max_of(kb);
          wgmma_wait<0>();
          wgmma_pin(acc);
          if (kb + 1 == n_kb) ctx.q_ring.release(ctx.q_fill);  // the tile's last Q K'^T
        }
        const float v_here = v_blk;
        // (pasa_accurate: S' stays in acc, seen as the mma C layout's [1][kKeys / 8][4] tiles.)
        [[maybe_unused]] auto& s32 = *reinterpret_cast<float (*)[1][kKeys / 8][4]>(acc);
        if constexpr (!kAccurate) {
#pragma unroll
          for (int q = 0; q < kKeys / 4; ++q) pa[0][q / 4][q % 4] = pack2<__half>(acc[2 * q], acc[2 * q + 1]);
        }
        constexpr float kLo = 1.0f / kMeanLoScale;
        const float mean[2] = {fmaf(acc[kKeys / 2 + 1], kLo, acc[kKeys / 2]),
                               fmaf(acc[kKeys / 2 + 3], kLo, acc[kKeys / 2 + 2])};
        ctx.k_ring.release(f);  // S' has been read: the K' slot is free
        float m_blk[2];
        [[maybe_unused]] __half2 m_use[2];
        if constexpr (kAccurate) {
          if (partial.needs_mask(key0, kKeys)) apply_mask(s32, p, key0, ctx.row_lo + ctx.g);
          Softmax::block_max_fp32(s32, m_blk);
        } else {
          if (partial.needs_mask(key0, kKeys)) apply_mask(pa, p, key0, ctx.row_lo + ctx.g);
          Softmax::block_max(pa, m_blk, m_use);
        }

        ctx.v_ring.wait(f);
        [[maybe_unused]] const float cur = Softmax::candidate(m_blk, mean, p.pasa_g);
        float ep[2], ec[2];
        if constexpr (kFp16Acc) {
          // PASA's state update (m and the two rescale factors) beside the exponentials, whose P it
          // scales: its O~ rule weighs the block by its key count (pasa_headroom.h).
          softmax.rescale(cur, v_here, static_cast<float>(kKeys), ep, ec);
          // Every exponential first (they need no factor), then P = fl(P e_cur) against the running
          // maximum, and O~ and the accumulator rescaled, before P V adds onto them.
#pragma unroll
          for (int kc = 0; kc < kPSteps; ++kc) Softmax::exponentiate_chunk(pa[0][kc], m_use, 0);
          const __half2 ec2[2] = {__float2half2_rn(ec[0]), __float2half2_rn(ec[1])};
#pragma unroll
          for (int kc = 0; kc < kPSteps; ++kc)
#pragma unroll
            for (int e = 0; e < 4; ++e) pa[0][kc][e] = as_u32(__hmul2_rn(as_half2(pa[0][kc][e]), ec2[e % 2]));
          if (__any_sync(0xffffffffu, ep[0] != 1.0f || ep[1] != 1.0f)) {
            const __half2 ep2[2] = {__float2half2_rn(ep[0]), __float2half2_rn(ep[1])};
#pragma unroll
            for (int n = 0; n < kDT; ++n)
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                o[n][i] = __hmul2_rn(ep2[i], o[n][i]);
                pv[2 * n + i] = as_u32(__hmul2_rn(ep2[i], as_half2(pv[2 * n + i])));
              }
          }
          wgmma_fence();
#pragma unroll
          for (int kc = 0; kc < kPSteps; ++kc) {
            hopper::mma_pv_fp16_acc<D>(pv, pa[0][kc], ctx.v_desc(f, kc));
            wgmma_f16acc_m64n8k16(psum_acc, pa[0][kc], ones_desc, kc > 0);
          }
        } else {
#pragma unroll
          for (int kc = 0; kc < kPSteps; ++kc) {
            if constexpr (kAccurate) {
              Softmax::exponentiate_fp32(pa[0][kc], s32, m_blk, 0, kc);
            } else {
              Softmax::exponentiate_chunk(pa[0][kc], m_use, 0);
            }
            wgmma_fence();
            hopper::mma_pv<__half, D>(pv, pa[0][kc], ctx.v_desc(f, kc), kc > 0);
            wgmma_f16_m64n8k16(psum_acc, pa[0][kc], ones_desc, kc > 0);
          }
        }
        wgmma_commit();
        if constexpr (kHasNext) {  // acc has been read: the next S' queues behind this P V
          ctx.k_ring.wait(f + 1);
          issue_qk(f + 1);
          v_blk = v_max_of(kb + 1);
        }
        wgmma_wait<kHasNext ? 1 : 0>();  // P V and the row sums of P
        wgmma_pin(pa);
        wgmma_pin(pv);
        wgmma_pin(psum_acc);
        ctx.v_ring.release(f);
        if constexpr (kFp16Acc) {
          const float psum[2] = {__low2float(as_half2(psum_acc[0])), __low2float(as_half2(psum_acc[1]))};
          softmax.add_running_block(psum);
          if ((ctx.kb_first + kb + 1) % kPasaPvBlocks == 0 || kb + 1 == n_kb) {  // O~ = fl(O~ + acc)
#pragma unroll
            for (int n = 0; n < kDT; ++n)
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                o[n][i] = __hadd2(o[n][i], as_half2(pv[2 * n + i]));
                pv[2 * n + i] = 0u;
              }
          }
        } else {
          // PASA's state update (m and the two rescale factors), its O~ rule weighing the block by its
          // row sums of P (pasa_headroom.h), which P against the block's own maximum does not need
          // before here.
          const float psum[2] = {psum_acc[0], psum_acc[2]};
          softmax.rescale(cur, v_here, Softmax::row_weight(psum), ep, ec);
          const int shift = pasa_pv_shift(v_here, kKeys);  // (the same in every thread: a uniform branch below)
          softmax.add_block(psum);
          // O~ = fl(fl(ep O~) + fl(ec fl(P V))): pasa's factors are fp16 values (its state is fp16), so
          // the products are fp16 multiplies; pasa_accurate's are fp32, so a product is rounded to fp16
          // once from its exact value, as the emulator rounds it (rescale_add_half2_once: only the one
          // whose factor is not 1 where one is). A block of large V (shift > 0, pasa_headroom.h) rounds
          // P V at 2^-shift times its value, and its factor carries the 2^shift.
          const __half2 ep2[2] = {__float2half2_rn(ep[0]), __float2half2_rn(ep[1])};
          auto update_o = [&](auto keep_o, auto shifted) {
            const PvShift<decltype(shifted)::value> pv_shift(shift);
            const float ec_up[2] = {pv_shift.factor(ec[0]), pv_shift.factor(ec[1])};
            const __half2 ec2[2] = {__float2half2_rn(ec_up[0]), __float2half2_rn(ec_up[1])};
#pragma unroll
            for (int n = 0; n < kDT; ++n)
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                const __half2 block = pv_shift.pair(&pv[4 * n + 2 * i]);
                if constexpr (kAccurate) {
                  o[n][i] = rescale_add_half2_once(ep[i], o[n][i], ec_up[i], block);
                } else if constexpr (decltype(keep_o)::value) {  // fl(1 O~) = O~
                  o[n][i] = __hadd2(o[n][i], __hmul2_rn(ec2[i], block));
                } else {  // (mul.rn: ptxas would otherwise fuse a product into the add, one rounding fewer)
                  o[n][i] = __hadd2(__hmul2_rn(ep2[i], o[n][i]), __hmul2_rn(ec2[i], block));
                }
              }
          };
          // pasa at D 128: once a row's reference settles, most blocks leave it (ep = 1), and where that
          // holds for all 16 rows of the warp the product by ep is skipped (D 64 measured no gain: its
          // O~ update is half as long, and the branch splits the block the scheduler interleaves).
          if (shift != 0) {
            update_o(std::false_type{}, std::true_type{});
          } else if (!kAccurate && D >= 128 && __all_sync(0xffffffffu, ep[0] == 1.0f && ep[1] == 1.0f)) {
            update_o(std::true_type{}, std::false_type{});
          } else {
            update_o(std::false_type{}, std::false_type{});
          }
        }
        if constexpr (kHasNext) {
          wgmma_wait<0>();  // the next block's S'
          wgmma_pin(acc);
          if (kb + 2 == n_kb) ctx.q_ring.release(ctx.q_fill);  // that was the tile's last Q K'^T
        }
      };

      if constexpr (kQkAtBlockStart) {
        if (n_kb == 0) ctx.q_ring.release(ctx.q_fill);
        for (int kb = 0; kb < n_kb; ++kb) run_block(kb, std::false_type{});
      } else {
        if (n_kb > 0) {
          ctx.k_ring.wait(fill);
          issue_qk(fill);
          v_blk = v_max_of(0);
          wgmma_wait<0>();
          wgmma_pin(acc);
          if (n_kb == 1) ctx.q_ring.release(ctx.q_fill);
        } else {
          ctx.q_ring.release(ctx.q_fill);
        }
        for (int kb = 0; kb + 1 < n_kb; ++kb) run_block(kb, std::true_type{});
        if (n_kb > 0) run_block(n_kb - 1, std::false_type{});
      }

      // Epilogue: O = fl(O~ (1 / l)) (0 for a row that saw no key; the emulator divides, which can
      // differ by one fp16 ulp), the LSE.
      float row_l[2], lse[2];
      softmax.finish(row_l, lse);
      ctx.store_rows(row_l, lse, [&](int n8, int i) { return __half22float2(o[n8][i]); },
                     OutRounding::via_fp16);
    }
  };
};

}  // namespace pasa::cuda
