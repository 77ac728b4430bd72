// SPDX-License-Identifier: Apache-2.0
// The pasa policy's forward kernel (PASA, Algorithm 1, docs/algorithms.md section 3) on sm_90a:
//
// Prepass (pasa_prepare.cu, scratch from pasa's stream-ordered pool): per key block of s2 = 128 keys,
// K' = M K in fp16, written as the tiles this kernel's shared memory holds (pasa_stage.cuh), so that
// one bulk copy brings in a K' tile; bf16 V rounded to fp16. V's rows come in by TMA (tma.h), 128
// keys x 64 channels a box, swizzled: the MN-major B of P V.
// Main kernel (Hopper wgmma, wgmma.cuh; tiles on mbarriers, mbarrier.cuh): one warpgroup of 64 query
// rows per CTA, Q (rounded to fp16) in registers as the wgmma A fragments. Per key block, in the
// emulator's order and at its fp16 rounding points (PasaSoftmax, online_softmax.cuh):
//   S' = Q K'^T by one m64n136k16 wgmma chain (fp32 accumulators rounded to fp16 pairs, which are the
//     A fragments of P V as they stand); its 8 extra columns are Q against the block's mean K' row,
//     the row sums of S' that the local pseudo-average needs (in fp32, from the prepass's mean rows
//     in fp16 hi + lo, about 22 bits);
//   the block max, then per k16 step P = fl(e^(fl(S' - m_blk))) packed in place and sent at once to
//     the tensor cores: P V (fp32 accumulators, a fresh sum per block) and P times a matrix of ones
//     (m64n8k16: the row sums of P, for l, in fp32);
//   PASA's state update (F, m, the two rescale factors, l) once per row, by one lane of the quad;
//   the next block's S' issued, and O~ = fl(fl(ep O~) + fl(ec fl(P V))) in fp16 while it runs.
// Epilogue: O = fl(O~ (1 / l)), LSE = m + log l + g F.
//
// Two CTAs per SM at D = 128, three at D = 64: one's softmax runs beside another's MMAs. Shared memory
// per CTA: one K' slot and two V slots at D = 128 (K'_j+1 loads while block j's softmax and P V run;
// V_j+1 from one block earlier), two of each at D = 64. bench/NOTES.md (fourth session) has the
// measurements: 1.02-1.25x the exact kernel at S >= 4k on an H200.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/device_pool.h"
#include "cuda/block/epilogue.cuh"
#include "cuda/block/fwd_mask.cuh"
#include "cuda/host/kernel_params.h"
#include "cuda/arch/mbarrier.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/block/pasa_stage.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/host/tma.h"
#include "cuda/arch/wgmma.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

constexpr int kThreads = 128;  // one warpgroup
constexpr int kRowsPerCta = 64;
constexpr int kKeys = kPasaBlockKv;
constexpr int kOnesBytes = 1024;  // the all-ones fp16 B tile of the P row sums

template <int D>
struct PasaRing {
  using Stage = PasaStage<D>;
  static constexpr int kVBoxBytes = kKeys * 128;          // a TMA box: 128 keys x 64 channels
  static constexpr int kVBytes = (D / 64) * kVBoxBytes;  // a V slot: the keys' rows, D / 64 boxes
  static constexpr int kKStages = D == 128 ? 1 : 2;
  static constexpr int kVStages = 2;
  static constexpr int kCtasPerSm = D == 128 ? 2 : 3;  // (225 / 159 registers; 100 / 68 KB)
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKStages * Stage::kKBytes;
  static constexpr int kOnesOffset = kVOffset + kVStages * kVBytes;
  static constexpr int kSmemBytes = kOnesOffset + kOnesBytes + 1024;  // + slack to align the base
};

struct PasaMain {
  CUtensorMap v_map;  // V in fp16, boxes of 128 keys x 64 channels (tma.h)
  FwdParams p;
  const std::uint8_t* tiles;  // [B, Hkv, n_kb] K' stages
  int n_kb, heads_kv;
};

// Two 16-bit elements of Q (channels c, c + 1 of one row) as an fp16 pair.
template <typename QElem>
__device__ __forceinline__ std::uint32_t load_q_pair(const QElem* src) {
  const std::uint32_t raw = *reinterpret_cast<const std::uint32_t*>(src);
  if constexpr (std::is_same_v<QElem, __half>) {
    return raw;
  } else {
    return bf16x2_to_half2(raw);
  }
}

// One k16 step of P V with V's rows as the MN-major B.
template <int D>
__device__ __forceinline__ void wgmma_pv(float (&c)[D / 2], const std::uint32_t (&a)[4], std::uint64_t desc,
                                         bool accumulate) {
  if constexpr (D == 128) {
    wgmma_f16_m64n128k16<true>(c, a, desc, accumulate);
  } else {
    wgmma_f16_m64n64k16<true>(c, a, desc, accumulate);
  }
}

// grid (ceil(seq_q / 64), Hq, B), block 128; warp w owns rows 16 w .. 16 w + 15 of the CTA's 64.
// kAccurate: the pasa_accurate policy (S' and the state in fp32; PasaSoftmax's kFp16State = false).
template <typename QElem, int D, bool kAccurate>
__global__ void __launch_bounds__(kThreads, PasaRing<D>::kCtasPerSm) pasa_fwd_kernel(const __grid_constant__ PasaMain m) {
  using Softmax = PasaSoftmax<1, !kAccurate>;
  using Ring = PasaRing<D>;
  using Stage = PasaStage<D>;
  constexpr int kKS = Ring::kKStages, kVS = Ring::kVStages;
  constexpr int kQSteps = D / 16;       // k16 steps of Q K'^T
  constexpr int kPSteps = kKeys / 16;   // k16 steps of P V
  constexpr int kDT = D / 8;            // n8 tiles of O
  constexpr int kSAcc = (kKeys + 8) / 2;  // S' accumulators a thread: 32 pairs, then the sums
  extern __shared__ std::uint8_t pasa_smem[];
  const std::uint32_t base = (smem_addr(pasa_smem) + 1023u) & ~1023u;
  const FwdParams& p = m.p;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int qb = p.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), h_kv = h / p.group;
  const std::int64_t bhk = static_cast<std::int64_t>(b) * m.heads_kv + h_kv;
  const int r0 = qb * kRowsPerCta;
  const int wr0 = r0 + warp * 16;
  const int rows[2] = {wr0 + g, wr0 + g + 8};

  const int n_kb = visited_key_blocks(p, r0, kRowsPerCta, kKeys, m.n_kb);

  // Q's A fragments (fp16; zeros past seq_q): the loads are issued first, so that their latency
  // passes under the barriers' set-up and the first tiles' copies.
  std::uint32_t qa[kQSteps][4];
  {
    const QElem* q = static_cast<const QElem*>(p.q.data) + b * p.q.stride_b + h * p.q.stride_h;
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = rows[e % 2], ch = 16 * kk + 8 * (e / 2) + 2 * t;
        qa[kk][e] = row < p.seq_q ? load_q_pair(q + row * p.q.stride_s + ch) : 0u;
      }
  }

  // Tile rings on mbarriers: full completes when a tile's bulk copy (thread 0 starts it) has landed,
  // empty when the four warps are done with the tile that was there. Tile j sits in slot j % stages
  // and uses phase (j / stages) & 1 of both barriers.
  __shared__ alignas(8) std::uint64_t k_full[kKS], k_empty[kKS], v_full[kVS], v_empty[kVS];
  if (tid == 0) {
    for (int st = 0; st < kKS; ++st) {
      mbar_init(smem_addr(&k_full[st]), 1);
      mbar_init(smem_addr(&k_empty[st]), kThreads / 32);
    }
    for (int st = 0; st < kVS; ++st) {
      mbar_init(smem_addr(&v_full[st]), 1);
      mbar_init(smem_addr(&v_empty[st]), kThreads / 32);
    }
    mbar_fence_init();
  }
  // The matrix of ones (fp16 1.0 = 0x3C00) for the row sums of P.
  const std::uint32_t ones = base + Ring::kOnesOffset;
  for (int i = tid; i < kOnesBytes / 4; i += kThreads) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ones + 4 * i), "r"(kOnesHalf2) : "memory");
  }
  fence_proxy_async_shared();
  __syncthreads();

  const std::uint8_t* stage_src = m.tiles + bhk * m.n_kb * Stage::kBytes;
  auto load_k = [&](int j) {  // thread 0 only
    if (j >= n_kb) return;
    const int st = j % kKS;
    if (j >= kKS) mbar_wait(smem_addr(&k_empty[st]), (j / kKS - 1) & 1);
    mbar_arrive_expect_tx(smem_addr(&k_full[st]), Stage::kKBytes);
    bulk_copy_to_shared(base + Ring::kKOffset + st * Stage::kKBytes,
                        stage_src + static_cast<std::int64_t>(j) * Stage::kBytes, Stage::kKBytes,
                        smem_addr(&k_full[st]));
  };
  auto load_v = [&](int j) {  // thread 0 only
    if (j >= n_kb) return;
    const int st = j % kVS;
    if (j >= kVS) mbar_wait(smem_addr(&v_empty[st]), (j / kVS - 1) & 1);
    mbar_arrive_expect_tx(smem_addr(&v_full[st]), Ring::kVBytes);
#pragma unroll
    for (int box = 0; box < D / 64; ++box) {
      tma_load_4d(base + Ring::kVOffset + st * Ring::kVBytes + box * Ring::kVBoxBytes, &m.v_map, 64 * box, j * kKeys,
                  h_kv, b, smem_addr(&v_full[st]));
    }
  };
  // This warp is done with a tile: one arrival on its slot's empty barrier.
  auto release = [&](std::uint64_t* empty, int slot) {
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&empty[slot]));
  };
  if (tid == 0) {
    for (int j = 0; j < kKS; ++j) load_k(j);
    for (int j = 0; j < kVS; ++j) load_v(j);
  }

  Softmax softmax;
  softmax.init();
  __half2 o[kDT][2];  // O~ in fp16: tile n's pair of row g (i = 0) and of row g + 8 (i = 1)
#pragma unroll
  for (int n = 0; n < kDT; ++n) o[n][0] = o[n][1] = __float2half2_rn(0.0f);

  float acc[kSAcc];  // S' of one block (column 8 (i / 4) + 2 t + i % 2 of row g + 8 ((i % 4) / 2))
#pragma unroll
  for (int i = 0; i < kSAcc; ++i) acc[i] = 0.0f;
  float c[D / 2];  // one block's P V
#pragma unroll
  for (int i = 0; i < D / 2; ++i) c[i] = 0.0f;
  float psum_acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // P times ones: row g in [0], [1]; row g + 8 in [2], [3]
  std::uint32_t pa[1][kPSteps][4];               // S', then P, as the P V A fragments

  auto issue_qk = [&](int j) {
    const std::uint32_t k_tile = base + Ring::kKOffset + (j % kKS) * Stage::kKBytes;
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      const std::uint64_t desc = kmajor_desc<128>(k_tile + (kk / 4) * Stage::kKAtomBytes) + 2 * (kk % 4);
      wgmma_f16_m64n136k16(acc, qa[kk], desc, kk > 0);
    }
    wgmma_commit();
  };
  const std::uint64_t ones_desc = plain_desc(ones);
  auto wait_k = [&](int j) { mbar_wait(smem_addr(&k_full[j % kKS]), (j / kKS) & 1); };
  auto wait_v = [&](int j) { mbar_wait(smem_addr(&v_full[j % kVS]), (j / kVS) & 1); };

  // Block kb with its S' in acc: the softmax and P V, PASA's update, then (kHasNext) the next block's
  // S' on the tensor cores while O~ takes in this block's P V. lower_half: no row of the CTA sees keys
  // 64 .. 127 of the block (the causal diagonal or the sequence end, in the last block); their
  // exponentials and P V steps are left out (their P is 0; the pseudo-average still counts them). (The
  // variants are instantiations of their own so that no wgmma is issued conditionally, which would make
  // the compiler serialize them.)
  auto run_block = [&](int kb, auto has_next, auto lower_half) {
    constexpr bool kHasNext = decltype(has_next)::value;
    constexpr int kSteps = decltype(lower_half)::value ? kPSteps / 2 : kPSteps;
    const int key0 = kb * kKeys;
    // S' as fp16 pairs; the local pseudo-average of each row over the block's s2 keys (masked or not;
    // a short last block's padding keys included, pasa_prepare.cu).
    // (pasa_accurate: S' stays in acc, seen as the mma C layout's [1][kKeys / 8][4] tiles.)
    [[maybe_unused]] auto& s32 = *reinterpret_cast<float (*)[1][kKeys / 8][4]>(acc);
    if constexpr (!kAccurate) {
#pragma unroll
      for (int q = 0; q < kKeys / 4; ++q) pa[0][q / 4][q % 4] = pack2<__half>(acc[2 * q], acc[2 * q + 1]);
    }
    constexpr float kLo = 1.0f / kMeanLoScale;
    const float mean[2] = {Softmax::stat(fmaf(acc[kKeys / 2 + 1], kLo, acc[kKeys / 2])),
                           Softmax::stat(fmaf(acc[kKeys / 2 + 3], kLo, acc[kKeys / 2 + 2]))};
    release(k_empty, kb % kKS);  // this block's S' has completed: its K' slot is free
    if (tid == 0) load_k(kb + kKS);
    float m_blk[2];
    [[maybe_unused]] __half2 m_use[2];
    if constexpr (kAccurate) {
      if (block_needs_mask(p, key0, kKeys, wr0)) apply_mask(s32, p, key0, wr0 + g);
      Softmax::block_max_fp32(s32, m_blk);
    } else {
      if (block_needs_mask(p, key0, kKeys, wr0)) apply_mask(pa, p, key0, wr0 + g);
      Softmax::block_max(pa, m_blk, m_use);
    }

    wait_v(kb);
    const std::uint32_t v_tile = base + Ring::kVOffset + (kb % kVS) * Ring::kVBytes;
#pragma unroll
    for (int kc = 0; kc < kSteps; ++kc) {
      if constexpr (kAccurate) {
        Softmax::exponentiate_fp32(pa[0][kc], s32, m_blk, 0, kc);
      } else {
        Softmax::exponentiate_chunk(pa[0][kc], m_use, 0);
      }
      wgmma_fence();
      const std::uint64_t v_desc = mn_major_desc(v_tile, Ring::kVBoxBytes) + 128 * kc;  // 16 rows a step
      wgmma_pv<D>(c, pa[0][kc], v_desc, kc > 0);
      wgmma_f16_m64n8k16(psum_acc, pa[0][kc], ones_desc, kc > 0);
    }
    wgmma_commit();
    float ep[2], ec[2];
    softmax.rescale(kb, m_blk, mean, p.pasa_g, ep, ec);
    wgmma_wait<0>();  // P V and the row sums of P
    wgmma_pin(c);
    wgmma_pin(pa);
    wgmma_pin(psum_acc);
    release(v_empty, kb % kVS);
    if (tid == 0) load_v(kb + kVS);
    if constexpr (kHasNext) {
      wait_k(kb + 1);
      wgmma_fence();
      issue_qk(kb + 1);
    }
    const float psum[2] = {psum_acc[0], psum_acc[2]};
    softmax.add_block(psum);
    const __half2 ep2[2] = {__float2half2_rn(ep[0]), __float2half2_rn(ep[1])};
    const __half2 ec2[2] = {__float2half2_rn(ec[0]), __float2half2_rn(ec[1])};
#pragma unroll
    for (int n = 0; n < kDT; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const __half2 pv = __floats2half2_rn(c[4 * n + 2 * i], c[4 * n + 2 * i + 1]);
        o[n][i] = __hadd2(__hmul2(ep2[i], o[n][i]), __hmul2(ec2[i], pv));
      }
    if constexpr (kHasNext) {
      wgmma_wait<0>();  // the next block's S'
      wgmma_pin(acc);
      wgmma_pin(qa);  // (read by that wgmma: its registers must not be reused before here)
    }
  };

  if (n_kb > 0) {
    wait_k(0);
    wgmma_fence();
    issue_qk(0);
    wgmma_wait<0>();
    wgmma_pin(acc);
  }
  for (int kb = 0; kb + 1 < n_kb; ++kb) run_block(kb, std::true_type{}, std::false_type{});
  if (n_kb > 0) {
    const int visible_end = p.causal ? min(p.seq_kv, r0 + kRowsPerCta + p.causal_offset) : p.seq_kv;
    if ((n_kb - 1) * kKeys + kKeys / 2 >= visible_end) {
      run_block(n_kb - 1, std::false_type{}, std::true_type{});
    } else {
      run_block(n_kb - 1, std::false_type{}, std::false_type{});
    }
  }

  // Epilogue: O = fl(O~ (1 / l)) (0 for a row that saw no key; the emulator divides, which can differ
  // by one fp16 ulp), the LSE.
  float row_l[2], lse[2];
  softmax.finish(p.pasa_g, row_l, lse);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = rows[i];
    if (row >= p.seq_q) continue;
    const float inv = lse[i] == -INFINITY ? 0.0f : 1.0f / row_l[i];
    store_lse(p, b, h, row, lse[i]);
    char* out = output_row(p, b, h, row);
#pragma unroll
    for (int n = 0; n < kDT; ++n) {
      const float2 x = __half22float2(o[n][i]);
      store_pair(out, p.o_type, 8 * n + 2 * t, round_fp16(x.x * inv), round_fp16(x.y * inv));
    }
  }
}

template <typename QElem, int D, bool kAccurate>
void launch_typed(const PasaRequest& r, cudaStream_t stream) {
  const KernelRequest& c = r.call;
  const FwdParams& p = c.fwd;
  const int n_kb = (p.seq_kv + kKeys - 1) / kKeys;
  const std::size_t tile_bytes = pasa_tile_bytes(c.batch, c.heads_kv, n_kb, D);
  const bool bf16 = std::is_same_v<QElem, __nv_bfloat16>;  // V needs rounding to fp16 first
  const std::size_t v_bytes = bf16 ? static_cast<std::size_t>(c.batch) * c.heads_kv * p.seq_kv * D * 2 : 0;
  StreamBuffer scratch(tile_bytes + v_bytes, c.device, stream);
  auto* tiles = static_cast<std::uint8_t*>(scratch.get());
  void* v_fp16 = bf16 ? tiles + tile_bytes : nullptr;
  const std::int64_t sh = static_cast<std::int64_t>(p.seq_kv) * D;
  const Operand v = bf16 ? Operand{v_fp16, c.heads_kv * sh, sh, D} : p.v;
  // (the map and the attribute first: what the driver refuses is an error before anything is launched)
  const PasaMain m{fp16_row_tile_map(v, c.batch, c.heads_kv, p.seq_kv, D, kKeys, "v"), p, tiles, n_kb, c.heads_kv};
  constexpr int kSmem = PasaRing<D>::kSmemBytes;
  auto* kernel = pasa_fwd_kernel<QElem, D, kAccurate>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
             "cudaFuncSetAttribute(pasa_fwd_kernel, max dynamic shared memory)");
  launch_pasa_tiles(r, tiles, v_fp16, n_kb, stream);
  const int q_blocks = (p.seq_q + kRowsPerCta - 1) / kRowsPerCta;
  kernel<<<dim3(q_blocks, p.heads_q, c.batch), kThreads, kSmem, stream>>>(m);
  check_launch("pasa_fwd_kernel");
}

template <typename QElem, bool kAccurate>
void launch_dim(const PasaRequest& r, cudaStream_t stream) {
  if (r.call.head_dim == 64) {
    launch_typed<QElem, 64, kAccurate>(r, stream);
  } else if (r.call.head_dim == 128) {
    launch_typed<QElem, 128, kAccurate>(r, stream);
  } else {
    throw Error("pasa kernel: head dim must be 64 or 128");
  }
}

}  // namespace

void launch_pasa(const PasaRequest& r, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (r.call.in_type == ElemType::f16) {
    r.accurate ? launch_dim<__half, true>(r, s) : launch_dim<__half, false>(r, s);
  } else if (r.call.in_type == ElemType::bf16) {
    r.accurate ? launch_dim<__nv_bfloat16, true>(r, s) : launch_dim<__nv_bfloat16, false>(r, s);
  } else {
    throw Error("pasa kernel: inputs must be f16 or bf16");
  }
}

}  // namespace pasa::cuda
