// SPDX-License-Identifier: Apache-2.0
// The sage8 and sage_fp8 policies (SageAttention2's 8-bit attention, docs/algorithms.md section 4) on
// the Hopper engine (attention_fwd_hopper.cuh); they differ only in the codes of Q and K, the Codes
// parameter (sage8_qk_codes.cuh: INT8 or e4m3; "Q8" and "K8" below are either). The K and V slots hold
// the prepass's K8 and V8^T tiles (sage8_stage.cuh), each filled by one bulk copy; Q comes by TMA in the
// input dtype.
//
// Per tile, each consumer warpgroup quantizes its 64 rows of Q to Codes from the shared-memory tile,
// one scale per thread group of quant_group(thread, query) (rows r and r + 8 of each 16-row slab: the
// rows of one thread group's A fragments), into a K-major Q8 tile of its own (the extra shared memory,
// after a tile of e4m3 ones), and frees the Q slot at once; with an LSE it also takes alpha q .
// mean(K), smooth K's correction.
// Then per key block of 128:
//   S = (Q8 K8^T, s8 -> s32 or e4m3 -> f32) dq dk, by wgmma from shared memory;
//   the online softmax in fp32 (base 2) against the block maximum, taken on the raw scores (one scale
//     per key column parity, both positive) and dequantized once a row; each exponent is one FFMA of
//     the score as a float (Codes::as_float: for INT8 an integer add) with the block shift folded into
//     the bias;
//   P~ = exp(S - m_blk) * 448 rounded to e4m3, each k32 step of P~ V8 issued as soon as its 32 keys'
//     exponentials are packed, into a fresh fp32 accumulator, and with it P~ times the ones: the row
//     sums of P~ as rounded (the policy's rowsum=p), off the CUDA cores;
//   the next block's Q8 K8^T issued, and O = O exp(m_old - m_new) + (P~ V8) exp(m_blk - m_new) while it
//     runs (two-level accumulation, as the emulator models it).
// Epilogue: O = O / l * v_scale (O and l both carry P~'s factor 448; l divided out first, as the
// emulator does), saturated at the output type's largest finite value (epilogue.cuh's OutRounding),
// LSE = m + log l - log 448 + alpha q . mean(K).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "cuda/arch/mbarrier.cuh"
#include "cuda/arch/warpgroup.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/block/sage8_qk_codes.cuh"
#include "cuda/block/sage8_stage.cuh"
#include "cuda/kernels/attention_fwd_hopper.cuh"

namespace pasa::cuda {
namespace sage8 {

// The least dequantization scale: -inf times it stays -inf where a zero scale (an all-zero Q row
// group or K group, whose dot products are all 0 anyway) would make NaN.
constexpr float kMinScale = 1e-30f;
constexpr float kLog2Fp8Max = 8.807354922057604f;  // log2(448): P~ comes out of exp2 already * 448
constexpr float kLnFp8Max = 6.104793232414985f;    // ln(448)
constexpr std::uint32_t kOnesE4m3x4 = 0x38383838u;  // four e4m3 ones (1.0 = 0x38)

// One k32 step of a key block's P~ V8 into the fresh accumulator c.
template <int D>
__device__ __forceinline__ void mma_pv(float (&c)[D / 2], const std::uint32_t (&a)[4], std::uint64_t desc, bool acc) {
  if constexpr (D == 128) {
    wgmma_e4m3_m64n128k32(c, a, desc, acc);
  } else {
    wgmma_e4m3_m64n64k32(c, a, desc, acc);
  }
}

// Two 16-bit values (one 32-bit word of a Q row) as floats.
template <typename Elem>
__device__ __forceinline__ float2 unpack2(std::uint32_t w) {
  if constexpr (std::is_same_v<Elem, __half>) {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  } else {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
  }
}

}  // namespace sage8

template <typename Elem, class Codes>
struct Sage8HopperVariant : HopperVariantDefaults {
  // The all-ones e4m3 B tile of the P~ row sums (256 bytes read; 1024 keep the Q8 tiles after it
  // aligned for their swizzle).
  static constexpr int kOnesBytes = 1024;

  // Three consumer warpgroups at D 64, two at D 128 (S 64, the fresh P~ V sum D / 2, O D / 2, P~ 16
  // and its row sums 4 registers a thread); each keeps a 64-row Q8 tile in the extra shared memory. Four stages: the
  // 8-bit slots are half the 16-bit ones, so a deeper ring costs what two stages of those do.
  // (ptxas spills 88 bytes at D 64 in 160 registers; three warpgroups still measured 1.0-1.12x two,
  // bench/NOTES.md.)
  template <int D>
  static constexpr int kConsumers = D == 64 ? 3 : 2;
  template <int D>
  using Tile = HopperTile<D, kConsumers<D>, kOnesBytes + kConsumers<D> * 64 * D, SageStage<D>::kKBytes,
                          SageStage<D>::kVBytes, 4>;

  __device__ __forceinline__ static void prepare_smem(std::uint32_t extra, int thread, int threads) {
    for (int i = thread; i < kOnesBytes / 4; i += threads) {
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(extra + 4 * i), "r"(sage8::kOnesE4m3x4) : "memory");
    }
  }

  template <class Tile>
  __device__ __forceinline__ static const std::uint8_t* stage(const HopperParams& m, int b, int h_kv, int j,
                                                               int n_kb_all) {
    const std::int64_t i = (static_cast<std::int64_t>(b) * m.heads_kv + h_kv) * n_kb_all + j;
    return m.k_tiles + i * SageStage<Tile::kHeadDim>::kBytes;
  }
  template <class Tile>
  __device__ __forceinline__ static void load_k(const HopperParams& m, std::uint32_t slot, std::uint32_t bar, int b,
                                                int h_kv, int j, int n_kb_all) {
    bulk_copy_to_shared(slot, stage<Tile>(m, b, h_kv, j, n_kb_all), Tile::kKBytes, bar);
  }
  template <class Tile>
  __device__ __forceinline__ static void load_v(const HopperParams& m, std::uint32_t slot, std::uint32_t bar, int b,
                                                int h_kv, int j, int n_kb_all) {
    bulk_copy_to_shared(slot, stage<Tile>(m, b, h_kv, j, n_kb_all) + Tile::kKBytes, Tile::kVBytes, bar);
  }

  template <class Tile>
  struct Mainloop {
    static constexpr int D = Tile::kHeadDim;
    static constexpr int kKeys = Tile::kBlockN;  // 128
    static constexpr int kKT = D / 32;           // k32 steps of Q8 K8^T
    static constexpr int kNT = kKeys / 8;        // n8 column tiles of S
    static constexpr int kPT = kKeys / 32;       // k32 steps of P~ V8
    static constexpr int kDT = D / 8;            // n8 tiles of O
    static_assert(kKeys == kSage8BlockKv, "a key block is one prepass stage");

    // This warpgroup's rows of Q, read from the Q slot (16-bit, 128-byte swizzled boxes of 64
    // channels), quantized into its Q8 tile (K-major, D-byte rows with the D-byte swizzle) at `q8`.
    // Returns dq (Q's scale times alpha log2 e; one per thread group, so both rows share it) and, with
    // an LSE, each row's alpha q . mean(K). Frees the Q slot.
    __device__ __forceinline__ float quantize_q(const HopperConsumer<Tile>& ctx, std::uint32_t q8, std::int64_t bhk,
                                                float (&lse_off)[2]) const {
      const int t = ctx.t;
      float x[2][kKT][2][4];  // row j, k32 step kk, half: channels kk 32 + 16 half + 4 t + (0..3)
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = ctx.c * 64 + ctx.warp * 16 + ctx.g + 8 * j;  // in the CTA's Q tile
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int ch = kk * 32 + 16 * half + 4 * t;
            const std::uint32_t addr = ctx.base + Tile::kQOffset + (ch / 64) * Tile::kQBoxBytes +
                                       swizzled_offset<128>(row * 128 + (ch % 64) * 2);
            std::uint32_t w0, w1;
            asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(w0), "=r"(w1) : "r"(addr));
            const float2 a = sage8::unpack2<Elem>(w0), b = sage8::unpack2<Elem>(w1);
            float(&dst)[4] = x[j][kk][half];
            dst[0] = a.x;
            dst[1] = a.y;
            dst[2] = b.x;
            dst[3] = b.y;
#pragma unroll
            for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(dst[i]));
          }
      }
      ctx.q_ring.release(ctx.q_fill);  // (rows past the sequence are the TMA's zeros)
      const float alpha = ctx.m.quant.alpha;
      // (Before the Q8 stores below, which the mean's loads could not pass: one round trip, under the
      // quantization's arithmetic.)
      if (ctx.p.lse != nullptr) {
        const float* mean = ctx.m.quant.k_mean + bhk * D;
        float dot[2] = {0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float4 mu = *reinterpret_cast<const float4*>(mean + kk * 32 + 16 * half + 4 * t);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const float(&v)[4] = x[j][kk][half];
              dot[j] += v[0] * mu.x + v[1] * mu.y + v[2] * mu.z + v[3] * mu.w;
            }
          }
#pragma unroll
        for (int j = 0; j < 2; ++j) lse_off[j] = alpha * quad_sum(dot[j]);
      } else {
        lse_off[0] = lse_off[1] = 0.0f;
      }
      amax = quad_max(amax);
      // x * inv: x / scale without a division each. (The softmax scale alpha is >= 0: the maxima of
      // the raw scores below assume a positive dequantization scale; the dispatch refuses a negative one.)
      const float inv = amax == 0.0f ? 0.0f : Codes::kMax / amax;
      // The words where the A fragments of the register form would be: rows g, g + 8 of the warp's
      // slab, bytes kk 32 + 16 half + 4 t.
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = ctx.warp * 16 + ctx.g + 8 * j;  // in the warpgroup's Q8 tile
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const std::uint32_t addr = q8 + swizzled_offset<D>(row * D + kk * 32 + 16 * half + 4 * t);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(Codes::pack(x[j][kk][half], inv)) : "memory");
          }
      }
      fence_proxy_async_shared();
      named_barrier_sync(2 + ctx.c, 128);  // the warpgroup's Q8 tile is whole (barrier 1: start-up)
      return amax / Codes::kMax * alpha * kLog2e;
    }

    __device__ __forceinline__ void run_tile(HopperConsumer<Tile>& ctx) const {
      const FwdParams& p = ctx.p;
      const QuantScales& qs = ctx.m.quant;
      const int n_kb = ctx.n_kb, fill = ctx.fill, t = ctx.t;
      const int n_kb_all = (p.seq_kv + kKeys - 1) / kKeys;
      const std::int64_t bhk = static_cast<std::int64_t>(ctx.tile.b) * ctx.m.heads_kv + ctx.tile.h / p.group;
      const int rows[2] = {ctx.row_lo + ctx.g, ctx.row_lo + ctx.g + 8};
      const std::uint32_t q8 = ctx.extra() + kOnesBytes + ctx.c * 64 * D;
      const std::uint64_t ones_desc = plain_desc(ctx.extra());
      float lse_off[2];
      const float dq = quantize_q(ctx, q8, bhk, lse_off);

      float o[kDT][4];
#pragma unroll
      for (int i = 0; i < kDT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
      float m_run[2] = {-INFINITY, -INFINITY};
      float l_run[2] = {0.0f, 0.0f};  // each row's sum (times 448), the same in the thread group's four threads
      // S of one block: 64 values a thread, column 8 (i / 4) + 2 t + i % 2 of row g + 8 ((i % 4) / 2).
      typename Codes::Acc acc[kKeys / 2];
      // The K scales of the block whose S is in acc, for this thread's two key columns (key mod 8 = 2t,
      // 2t + 1); loaded when its Q K^T is issued, so that the load is covered by the MMAs.
      float dk[2] = {0.0f, 0.0f};
      float c[D / 2];            // one key block's P~ V8
      float lsum[4];             // its P~ times ones: row g in [0], [1]; row g + 8 in [2], [3]
      std::uint32_t pa[kPT][4];  // P~ in e4m3 as the P~ V MMA's A fragments

      auto issue_qk = [&](int kb) {
        const float* ksc = qs.k_scale + (bhk * n_kb_all + ctx.kb_first + kb) * 8;
        dk[0] = ksc[2 * t];
        dk[1] = ksc[2 * t + 1];
        const std::uint32_t k8 = ctx.k_slot(fill + kb);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk) {
          Codes::mma_ss(acc, kmajor_desc<D>(q8) + 2 * kk, kmajor_desc<D>(k8) + 2 * kk, kk > 0);
        }
        wgmma_commit();
      };

      // Block kb's softmax on acc, then its P~ V: masking, block maximum, running maximum; then per k32
      // step its 32 keys' exponentials, packed into that step's A fragment and issued at once, with the
      // step's row sums. Returns the factors that fold P~ V and the sums into O and l.
      auto softmax_and_issue_pv = [&](int kb, float (&ep)[2], float (&ec)[2]) {
        const int key0 = (ctx.kb_first + kb) * kKeys;
        if (block_needs_mask(p, key0, kKeys, ctx.row_lo)) {
          // Each row's limit relative to the thread's first key, tested against the constant column
          // 8 (i / 4) + i % 2 (fwd_mask.cuh's mask_columns).
          const int hi[2] = {visible_limit(p, rows[0]) - key0 - 2 * t, visible_limit(p, rows[1]) - key0 - 2 * t};
#pragma unroll
          for (int i = 0; i < kKeys / 2; ++i) {
            if ((i / 4) * 8 + (i & 1) >= hi[(i >> 1) & 1]) acc[i] = Codes::kMasked;
          }
        }
        const float scale[2] = {fmaxf(dq * dk[0], sage8::kMinScale), fmaxf(dq * dk[1], sage8::kMinScale)};
        const float offset[2] = {Codes::offset(scale[0]), Codes::offset(scale[1])};
        float bias[2][2];  // [row][parity]: offset less the row's block shift
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          typename Codes::Acc part[2][kNT / 2];  // [parity]: a tree, not a chain, keeps the pipes busy
#pragma unroll
          for (int par = 0; par < 2; ++par)
#pragma unroll
            for (int nt = 0; nt < kNT / 2; ++nt)
              part[par][nt] = Codes::max(acc[4 * nt + 2 * j + par], acc[4 * (nt + kNT / 2) + 2 * j + par]);
#pragma unroll
          for (int w = kNT / 4; w > 0; w /= 2)
#pragma unroll
            for (int par = 0; par < 2; ++par)
#pragma unroll
              for (int i = 0; i < w; ++i) part[par][i] = Codes::max(part[par][i], part[par][i + w]);
          float mb = -INFINITY;
#pragma unroll
          for (int par = 0; par < 2; ++par)
            mb = fmaxf(mb, fmaf(Codes::as_float(part[par][0]), scale[par], offset[par]));
          mb = quad_max(mb);
          float shift = 0.0f;
          if (mb == -INFINITY) {  // every key of the block masked for this row: it adds nothing
            ep[j] = 1.0f;
            ec[j] = 0.0f;
          } else {
            const float mn = fmaxf(m_run[j], mb);
            ep[j] = m_run[j] == -INFINITY ? 0.0f : fast_exp2(m_run[j] - mn);
            ec[j] = fast_exp2(mb - mn);
            shift = mb - sage8::kLog2Fp8Max;
            m_run[j] = mn;
          }
#pragma unroll
          for (int par = 0; par < 2; ++par) bias[j][par] = offset[par] - shift;
        }
        const int f = fill + kb;
        ctx.v_ring.wait(f);
        const std::uint32_t v8 = ctx.v_slot(f);
#pragma unroll
        for (int kc = 0; kc < kPT; ++kc) {
          float e[16];  // n-tiles 4 kc .. 4 kc + 3: the keys of P~ V's k32 step kc
#pragma unroll
          for (int x = 0; x < 16; ++x) {
            const int i = 16 * kc + x, j = (i >> 1) & 1, par = i & 1;
            e[x] = fast_exp2(fmaf(Codes::as_float(acc[i]), scale[par], bias[j][par]));
          }
          // The A fragment (the key permutation of the prepass's V8^T).
          pa[kc][0] = pack_e4m3(e[0], e[1], e[4], e[5]);
          pa[kc][1] = pack_e4m3(e[2], e[3], e[6], e[7]);
          pa[kc][2] = pack_e4m3(e[8], e[9], e[12], e[13]);
          pa[kc][3] = pack_e4m3(e[10], e[11], e[14], e[15]);
          wgmma_fence();
          sage8::mma_pv<D>(c, pa[kc], kmajor_desc<kKeys>(v8) + 2 * kc, kc > 0);
          wgmma_e4m3_m64n8k32(lsum, pa[kc], ones_desc, kc > 0);
        }
        wgmma_commit();
      };

      // O = O ep + c ec and l = l ep + lsum ec; when no row of the warp has a new maximum (ep = 1, the
      // common case once the first blocks are in) the rescale of O is skipped.
      auto fold = [&](const float (&ep)[2], const float (&ec)[2]) {
#pragma unroll
        for (int j = 0; j < 2; ++j) l_run[j] = ep[j] * l_run[j] + ec[j] * lsum[2 * j];
        if (__all_sync(0xffffffffu, ep[0] == 1.0f && ep[1] == 1.0f)) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[dt][i] = fmaf(c[4 * dt + i], ec[i >> 1], o[dt][i]);
        } else {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[dt][i] = o[dt][i] * ep[i >> 1] + c[4 * dt + i] * ec[i >> 1];
        }
      };

      if (n_kb > 0) {
        ctx.k_ring.wait(fill);
        issue_qk(0);
        wgmma_wait<0>();
        wgmma_pin(acc);
        ctx.k_ring.release(fill);
      }
      // Every block but the last: its softmax and P~ V, then the next block's Q K^T on the tensor cores
      // while O takes in the P~ V. (The last block is peeled off so that no wgmma is issued under a
      // run-time condition, which would make ptxas serialize them.)
      for (int kb = 0; kb + 1 < n_kb; ++kb) {
        float ep[2], ec[2];
        softmax_and_issue_pv(kb, ep, ec);
        ctx.k_ring.wait(fill + kb + 1);
        issue_qk(kb + 1);
        wgmma_wait<1>();  // this block's P~ V
        wgmma_pin(c);
        wgmma_pin(lsum);
        wgmma_pin(pa);
        ctx.v_ring.release(fill + kb);
        fold(ep, ec);
        wgmma_wait<0>();  // the next block's S
        wgmma_pin(acc);
        ctx.k_ring.release(fill + kb + 1);
      }
      if (n_kb > 0) {
        float ep[2], ec[2];
        softmax_and_issue_pv(n_kb - 1, ep, ec);
        wgmma_wait<0>();
        wgmma_pin(c);
        wgmma_pin(lsum);
        wgmma_pin(pa);
        ctx.v_ring.release(fill + n_kb - 1);
        fold(ep, ec);
      }

      // Epilogue: O / l * v_scale (both O and l carry the factor 448), the LSE with smooth K's correction.
      // The V scales of the thread's channels are loaded together first: loaded in store_rows' loop,
      // each would wait for the previous pair's store (which it might alias), a round trip per n8 tile.
      float2 vs[kDT];
      const float* vsc = qs.v_scale + bhk * D;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) vs[dt] = *reinterpret_cast<const float2*>(vsc + 8 * dt + 2 * t);
      float lse[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        lse[j] = l_run[j] > 0.0f ? m_run[j] * kLn2 + logf(l_run[j]) - sage8::kLnFp8Max + lse_off[j] : -INFINITY;
      }
      ctx.store_rows(
          l_run, lse, [&](int n8, int i) { return make_float2(o[n8][2 * i], o[n8][2 * i + 1]); },
          OutRounding::saturate, [&](int n8) { return vs[n8]; });
      // Every warp's part of this tile's last Q8 K8^T has completed before any warp writes the next
      // tile's Q8 (a warp's wgmma_wait covers its own part only).
      named_barrier_sync(2 + ctx.c, 128);
    }
  };
};

}  // namespace pasa::cuda
