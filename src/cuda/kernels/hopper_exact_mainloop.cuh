// SPDX-License-Identifier: Apache-2.0
// The exact policy on the Hopper engine (attention_fwd_hopper.cuh): FlashAttention-2's online softmax
// in fp32 (ExactSoftmax, algorithms.md section 1), P rounded to the input dtype for P V.
//
// Also the sliding window (the tile's key blocks start at the first row's window, fwd_mask.cuh), the
// logit softcap (on the fp32 scores before the masks and the softmax) and the attention mask (read
// from global memory per score, apply_attn_mask).
//
// Per key block j, FlashAttention-3's intra-warpgroup overlap (section 3.2): S_j = Q K_j^T is issued,
// O is rescaled for block j - 1's maxima while it runs, then P_{j-1} V_{j-1} is issued; the softmax
// of block j (mask, maxima, exponentials) runs on the CUDA cores under P_{j-1} V_{j-1}; P_j is packed
// into the A fragments once that GEMM has stopped reading them. Both GEMMs on wgmma: S from Q and K
// in shared memory, O from P in registers and V in shared memory.
#pragma once

#include <cstdint>

#include "cuda/arch/tma.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/kernels/attention_fwd_hopper.cuh"

namespace pasa::cuda {

// kScoreMods: the call has an attention mask or a logit softcap, read at run time (an instantiation
// of its own: the other has none of their code in its loop, which halves the loop's code and
// measured 1.005-1.025x at D 64 1k, bench/NOTES.md; at D 64 this one runs two consumer warpgroups of
// 240 registers, the mask's reads and address arithmetic needing them). Both apply the causal
// diagonal, the sliding window and the sequence end.
// kConsumers64: the consumer warpgroups at D 64. Three by default (192 query rows share each K and V
// tile; the softmax, whose work per score does not shrink with D, has more warps to hide it); two for
// short causal calls, whose 192-row tiles leave more rows idle past the diagonal and the sequence end,
// and for calls whose last 192-row tile is mostly padding (the launcher chooses:
// attention_fwd_exact_hopper.cu). Two at D 128 (S, P and O need ~200 registers a thread).
// The epilogue writes O through shared memory (store_rows) except at D 64 with two warpgroups, where
// it measured 0.92x at 4k causal and 0.97x at 1k full (three warpgroups: 1.03x at 4k, bench/NOTES.md).
template <typename E, bool kScoreMods = false, int kConsumers64 = kScoreMods ? 2 : 3>
struct ExactHopperVariant : HopperVariantDefaults {
  using Elem = E;

  template <int D>
  using Tile = HopperTile<D, D == 64 ? kConsumers64 : 2, 0, 2 * 128 * D, 2 * 128 * D, 2,
                          D != 64 || kConsumers64 == 3 ? OStage::own : OStage::none>;

  template <class Tile>
  __device__ __forceinline__ static void load_k(const HopperParams& m, std::uint32_t slot, std::uint32_t bar, int b,
                                                int h_kv, int j, int /*n_kb_all*/) {
#pragma unroll
    for (int box = 0; box < Tile::kBoxes; ++box) {
      tma_load_4d(slot + box * Tile::kKBoxBytes, &m.k_map, 64 * box, j * Tile::kBlockN, h_kv, b, bar);
    }
  }

  template <class Tile>
  struct Mainloop {
    static constexpr int D = Tile::kHeadDim;
    static constexpr int kBlockN = Tile::kBlockN;
    static constexpr int kQSteps = D / 16;        // k16 steps of Q K^T
    static constexpr int kPSteps = kBlockN / 16;  // k16 steps of P V
    static constexpr int kNTiles = kBlockN / 8;   // n8 score tiles of a row
    static constexpr int kDTiles = D / 8;         // n8 output tiles of a row

    __device__ __forceinline__ void run_tile(HopperConsumer<Tile>& ctx) {
      const FwdParams& p = ctx.p;
      const int n_kb = ctx.n_kb, fill = ctx.fill;
      ExactSoftmax<1> softmax;
      softmax.init();
      float o[D / 2];
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
      float s[kBlockN / 2];          // S of one block: column 8 (i / 4) + 2 t + i % 2 of row g + 8 ((i % 4) / 2)
      std::uint32_t pf[kPSteps][4];  // P of the previous block as the A fragments of P V
      auto& s4 = *reinterpret_cast<float (*)[1][kNTiles][4]>(s);

      // (Each GEMM begins with a wgmma fence: the two GEMMs differ in shape, so the hardware does
      // not order their register accesses by itself, and without it ptxas inserts waits of its own.)
      auto issue_qk = [&](int f) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kQSteps; ++kk) wgmma_m64n128k16_ss<E, false>(s, ctx.q_desc(kk), ctx.k_desc(f, kk), kk > 0);
        wgmma_commit();
      };
      auto issue_pv = [&](int f) {
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < kPSteps; ++kc) hopper::mma_pv<E, D>(o, pf[kc], ctx.v_desc(f, kc), true);
        wgmma_commit();
      };
      // The block's scores (soft-capped), masked, through the softmax: P in place (fp32) and O's
      // rescale factors. With a softcap the scores are scaled before the softmax, else inside it.
      const float scale_log2 = kScoreMods && p.softcap > 0.0f ? kLog2e : p.scale_log2;
      auto softmax_block = [&](int j, float (&rescale)[2]) {
        const int key0 = (ctx.kb_first + j) * kBlockN;
        if constexpr (kScoreMods) {
          if (p.softcap > 0.0f) {
#pragma unroll
            for (int i = 0; i < kBlockN / 2; ++i) s[i] = soft_cap(s[i], p.softcap, p.softcap_scale);
          }
          if (p.mask_type != MaskType::none) apply_attn_mask(s4, p, ctx.tile.b, ctx.tile.h, key0, ctx.row_lo + ctx.g);
        }
        if (block_needs_mask(p, key0, kBlockN, ctx.row_lo)) apply_mask(s4, p, key0, ctx.row_lo + ctx.g);
        return softmax.step(s4, scale_log2, rescale);
      };
      // P as Elem pairs in the A-fragment layout (once the previous P V has stopped reading pf).
      auto pack_p = [&] {
#pragma unroll
        for (int q = 0; q < kBlockN / 4; ++q) pf[q / 4][q % 4] = pack2<E>(s[2 * q], s[2 * q + 1]);
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

      if (n_kb > 0) {
        ctx.k_ring.wait(fill);
        issue_qk(fill);
        wgmma_wait<0>();
        wgmma_pin(s);
        if (n_kb == 1) ctx.q_ring.release(ctx.q_fill);
        ctx.k_ring.release(fill);
        softmax_block(0, rescale);  // O is still 0: nothing to rescale (moved stays false)
        pack_p();
      } else {
        ctx.q_ring.release(ctx.q_fill);
      }
      for (int j = 1; j < n_kb; ++j) {
        const int f = fill + j;
        ctx.k_ring.wait(f);
        issue_qk(f);
        rescale_o();
        ctx.v_ring.wait(f - 1);
        issue_pv(f - 1);
        wgmma_wait<1>();  // S_j
        wgmma_pin(s);
        if (j == n_kb - 1) ctx.q_ring.release(ctx.q_fill);
        ctx.k_ring.release(f);
        moved = softmax_block(j, rescale);
        wgmma_wait<0>();  // P_{j-1} V_{j-1}
        wgmma_pin(o);
        wgmma_pin(pf);
        ctx.v_ring.release(f - 1);
        pack_p();
      }
      if (n_kb > 0) {
        const int f = fill + n_kb - 1;
        rescale_o();
        ctx.v_ring.wait(f);
        issue_pv(f);
        wgmma_wait<0>();
        wgmma_pin(o);
        ctx.v_ring.release(f);
      }

      // Epilogue: O = O / l (0 for a row that saw no key), the LSE.
      float row_l[2], lse[2];
      softmax.finish(row_l, lse);
      ctx.store_rows(row_l, lse, [&](int n8, int i) { return make_float2(o[4 * n8 + 2 * i], o[4 * n8 + 2 * i + 1]); });
    }
  };
};

}  // namespace pasa::cuda
