// SPDX-License-Identifier: Apache-2.0
// SageAttention2's 8-bit forward kernel (the sage8 preset, docs/algorithms.md section 4) on sm_90a:
//
// Prepass (scratch from pasa's stream-ordered pool, device_pool.h):
//   1. per (b, h_kv): partial column sums of K and column maxima of |V| over chunks of kStatRows keys,
//      then the K mean (smooth K) and V's per-channel FP8 scale max|V| / 448;
//   2. K - mean quantized to INT8, one scale per thread group of quant_group(thread, key, s2 = 128):
//      within each key block the 16 rows with the same key mod 8 (the accumulator columns a thread holds);
//   3. V / scale rounded to FP8 e4m3, transposed ([D][keys]) with the keys of every 16-key chunk
//      permuted so that the softmax's C fragments are the PV MMA's A fragments as they are.
//   K8 and V8^T are written tile-major and pre-swizzled: each key block's two tiles, byte for byte as
//   the main kernel's shared memory holds them, so that one bulk copy brings in a stage.
// Main kernel (Hopper wgmma, wgmma.cuh; stages on mbarriers, mbarrier.cuh): Q quantized to INT8 in
// registers per thread group of quant_group(thread, query) (rows r and r + 8 of each 16-row slab: one
// thread group's A-fragment rows), with the LSE's smooth-K correction alpha q . mean(K); then per key
// block of 128: S = (Q8 K8^T, s8 -> s32) dq dk alpha, online softmax in fp32 (base 2) against the block
// maximum, P~ = exp(S - m_blk) * 448 rounded to e4m3, the block's P~ V8 (e4m3, f32 accumulate) in a
// fresh accumulator, added into an fp32 O rescaled by exp(m_old - m_new) and exp(m_blk - m_new)
// (two-level accumulation, as the emulator models it); O = O / l / 448 * v_scale,
// LSE = m + log l + alpha q . mean(K).
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/once_per_device.h"
#include "cuda/host/device_pool.h"
#include "cuda/block/epilogue.cuh"
#include "cuda/block/fwd_mask.cuh"
#include "cuda/host/kernel_params.h"
#include "cuda/arch/mbarrier.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

constexpr int kBlockKv = kSage8BlockKv;  // 128
constexpr int kStatRows = 256;           // keys per partial of the K / V statistics
constexpr int kThreads = 256;            // the prepass kernels: 8 warps

// One 16-bit element as a float. (K's quantization reads its four or two channels a lane this way:
// measured faster than one 8- or 4-byte load a lane, bench/NOTES.md.)
template <typename Elem>
__device__ __forceinline__ float load_in(const void* base, std::int64_t idx) {
  return static_cast<float>(static_cast<const Elem*>(base)[idx]);
}

// N = 4 or 8 consecutive 16-bit elements from element idx as floats, in one 8- or 16-byte load (rows
// are 16-byte aligned, cuda_attention.cpp checks it; idx is a multiple of N).
template <int N>
struct VecOf;
template <>
struct VecOf<4> { using type = uint2; };
template <>
struct VecOf<8> { using type = uint4; };
template <typename Elem, int N>
__device__ __forceinline__ void load_vec(const void* base, std::int64_t idx, float (&x)[N]) {
  using Vec = typename VecOf<N>::type;
  const Vec raw = *reinterpret_cast<const Vec*>(static_cast<const Elem*>(base) + idx);
  const Elem* e = reinterpret_cast<const Elem*>(&raw);
#pragma unroll
  for (int i = 0; i < N; ++i) x[i] = static_cast<float>(e[i]);
}

__device__ __forceinline__ std::int64_t elem_index(const Operand& op, int b, int h, int s, int d) {
  return b * op.stride_b + h * op.stride_h + static_cast<std::int64_t>(s) * op.stride_s + d;
}

constexpr int kMainThreads = 128;  // the main kernel: one warpgroup of 64 query rows per CTA
constexpr int kMainRows = 64;

// CTAs per SM the main kernel is built for: two at D = 128 (~240 registers a thread), three at
// D = 64. Independent CTAs drift out of step, so one's softmax overlaps another's MMAs. (CTAs of two
// or three warpgroups sharing each tile, which reads K / V from L2 once for all of them, were measured
// slower: bench/NOTES.md.)
template <int D>
constexpr int kMainCtasPerSm = D == 128 ? 2 : 3;

// K / V^T stages: tile j (its P~ V running), j + 1 (its Q K^T running), the rest loading. Three at
// D = 128 and four at D = 64 fill about 100 KB and 66 KB, what two or three CTAs an SM leave.
template <int D>
constexpr int kStages = D == 128 ? 3 : 4;

// One stage: a K tile (128 keys x D int8, rows D bytes) then a V^T tile (D rows x 128 keys e4m3, rows
// 128 bytes, keys permuted within 16-key chunks), each swizzled (wgmma.cuh) and starting on a 1024-byte
// boundary; the prepass writes them in this form to global memory.
template <int D>
struct SageStage {
  static constexpr int kKBytes = kBlockKv * D;
  static constexpr int kVBytes = D * kBlockKv;
  static constexpr int kBytes = kKBytes + kVBytes;
  static constexpr int kSmemBytes = kStages<D> * kBytes + 1024;  // + slack to align the first stage
};

struct Scratch {
  std::uint8_t* tiles;  // [B, Hkv, n_kb] stages: each key block's K8 tile then its V8^T tile, swizzled
                        // as the main kernel's shared memory holds them (SageStage), so one bulk copy
                        // moves a whole stage
  float* k_scale;       // [B, Hkv, n_kb, 8]
  float* k_mean;        // [B, Hkv, D]
  float* v_scale;       // [B, Hkv, D]
  float* k_sum_part;    // [B, Hkv, n_chunk, D]
  float* v_max_part;    // [B, Hkv, n_chunk, D]
  int n_kb, n_chunk;
};

// ---- prepass ------------------------------------------------------------------------------------

// grid (n_chunk, Hkv, B), block kThreads: column sums of K and maxima of |V| over one chunk of keys.
// Thread (row lane r, 8-channel group cg) reads 16 bytes of K and of V per key, keys r, r + kLanes, ...
// of the chunk; the row lanes then meet in shared memory.
template <typename Elem, int D>
__global__ void __launch_bounds__(kThreads) sage_kv_partials(Operand k, Operand v, int heads_kv, int seq_kv, Scratch s) {
  constexpr int kGroups = D / 8, kLanes = kThreads / kGroups;
  __shared__ float sum_sh[kLanes][D], max_sh[kLanes][D];
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int cg = threadIdx.x % kGroups, lane_r = threadIdx.x / kGroups;
  const int r1 = min((c + 1) * kStatRows, seq_kv);
  float sum[8] = {}, vmax[8] = {};
#pragma unroll 4
  for (int r = c * kStatRows + lane_r; r < r1; r += kLanes) {
    float kx[8], vx[8];
    load_vec<Elem, 8>(k.data, elem_index(k, b, h, r, cg * 8), kx);
    load_vec<Elem, 8>(v.data, elem_index(v, b, h, r, cg * 8), vx);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      sum[j] += kx[j];
      vmax[j] = fmaxf(vmax[j], fabsf(vx[j]));
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    sum_sh[lane_r][cg * 8 + j] = sum[j];
    max_sh[lane_r][cg * 8 + j] = vmax[j];
  }
  __syncthreads();
  const int d = threadIdx.x;
  if (d >= D) return;
  float total = 0.0f, m = 0.0f;
  for (int i = 0; i < kLanes; ++i) {
    total += sum_sh[i][d];
    m = fmaxf(m, max_sh[i][d]);
  }
  const std::int64_t o = ((static_cast<std::int64_t>(b) * heads_kv + h) * s.n_chunk + c) * D + d;
  s.k_sum_part[o] = total;
  s.v_max_part[o] = m;
}

// grid (Hkv, B), block D: K's column means and V's per-channel scales.
template <int D>
__global__ void __launch_bounds__(D) sage_kv_finalize(int heads_kv, int seq_kv, Scratch s) {
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const std::int64_t bh = static_cast<std::int64_t>(b) * heads_kv + h;
  double sum = 0.0;
  float vmax = 0.0f;
  for (int c = 0; c < s.n_chunk; ++c) {
    sum += s.k_sum_part[(bh * s.n_chunk + c) * D + d];
    vmax = fmaxf(vmax, s.v_max_part[(bh * s.n_chunk + c) * D + d]);
  }
  s.k_mean[bh * D + d] = static_cast<float>(sum / seq_kv);
  s.v_scale[bh * D + d] = vmax / 448.0f;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// The INT8 byte of x / scale, given inv = 1 / scale (0 for a zero scale): one multiply, no division.
__device__ __forceinline__ std::uint32_t quant_i8(float x, float inv) {
  const int q = max(-127, min(127, __float2int_rn(x * inv)));
  return static_cast<std::uint32_t>(q) & 0xffu;
}

// grid (n_kb, Hkv, B), block 256: warp w quantizes the group of key block blockIdx.x whose rows are
// w, w + 8, ..., w + 120 (one scale), after subtracting K's mean. Padding keys (>= seq_kv) are zeros.
template <typename Elem, int D>
__global__ void __launch_bounds__(kThreads) sage_quant_k(Operand k, int heads_kv, int seq_kv, Scratch s) {
  constexpr int kCols = D / 32;
  constexpr int kGroupRows = kBlockKv / 8;
  const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t bh = static_cast<std::int64_t>(b) * heads_kv + h;
  float mean[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) mean[j] = s.k_mean[bh * D + lane * kCols + j];
  float x[kGroupRows][kCols];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kGroupRows; ++i) {
    const int key = kb * kBlockKv + w + 8 * i;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      x[i][j] = key < seq_kv ? load_in<Elem>(k.data, elem_index(k, b, h, key, lane * kCols + j)) - mean[j] : 0.0f;
      amax = fmaxf(amax, fabsf(x[i][j]));
    }
  }
  amax = warp_max(amax);
  const float scale = amax / 127.0f, inv = amax == 0.0f ? 0.0f : 127.0f / amax;
  if (lane == 0) s.k_scale[(bh * s.n_kb + kb) * 8 + w] = scale;
#pragma unroll
  for (int i = 0; i < kGroupRows; ++i) {
    std::uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < kCols; ++j) packed |= quant_i8(x[i][j], inv) << (8 * j);
    std::uint8_t* dst = s.tiles + (bh * s.n_kb + kb) * SageStage<D>::kBytes +
                        swizzled_offset<D>((w + 8 * i) * D + lane * kCols);
    if constexpr (kCols == 4) {
      *reinterpret_cast<std::uint32_t*>(dst) = packed;
    } else {
      *reinterpret_cast<std::uint16_t*>(dst) = static_cast<std::uint16_t>(packed);
    }
  }
}

// Where key p (0..15) of a 16-key chunk is stored: the softmax's C fragment gives thread t of a row the
// keys 2t, 2t + 1 (n-tile 0) and 8 + 2t, 9 + 2t (n-tile 1); the PV MMA's A fragment wants its four
// bytes at positions 4t .. 4t + 3. So key p goes to 4 ((p % 8) / 2) + (p & 1) + 2 (p / 8).

// The e4m3 byte of x / scale given inv = 1 / scale (0 for an all-zero channel, whose scale is 0).
__device__ __forceinline__ std::uint32_t fp8_of(float x, float inv) {
  return __nv_cvt_float_to_fp8(x * inv, __NV_SATFINITE, __NV_E4M3);
}

// grid (n_kb, Hkv, B), block 4 D threads (one per 16-key chunk, chunk quarter m and 8-channel
// group): V / v_scale to e4m3, transposed into [D][keys] with the keys of each 16-key chunk permuted as
// above. Keys 2m, 2m + 1, 2m + 8, 2m + 9 of a chunk land in the four bytes at 4m, so thread (m, chunk,
// d-group) reads those four keys' 8 channels with 16-byte loads and writes one 32-bit word per channel:
// no shared-memory transposition. Padding keys are zeros.
constexpr int kChunks = kBlockKv / 16;
template <int D>
constexpr int kQuantVThreads = 4 * kChunks * (D / 8);

template <typename Elem, int D>
__global__ void __launch_bounds__(kQuantVThreads<D>) sage_quant_v(Operand v, int heads_kv, int seq_kv, Scratch s) {
  const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int m = threadIdx.x % 4, chunk = threadIdx.x / 4 % kChunks, d0 = threadIdx.x / (4 * kChunks) * 8;
  const std::int64_t bh = static_cast<std::int64_t>(b) * heads_kv + h;
  const int base = kb * kBlockKv + chunk * 16;
  const int keys[4] = {base + 2 * m, base + 2 * m + 1, base + 2 * m + 8, base + 2 * m + 9};
  float inv[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float scale = s.v_scale[bh * D + d0 + j];
    inv[j] = scale == 0.0f ? 0.0f : 1.0f / scale;
  }
  std::uint8_t* v_tile = s.tiles + (bh * s.n_kb + kb) * SageStage<D>::kBytes + SageStage<D>::kKBytes;
  std::uint32_t word[8] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (keys[i] >= seq_kv) continue;  // fp8 zero is the zero byte
    float x[8];
    load_vec<Elem, 8>(v.data, elem_index(v, b, h, keys[i], d0), x);
#pragma unroll
    for (int j = 0; j < 8; ++j) word[j] |= fp8_of(x[j], inv[j]) << (8 * i);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    *reinterpret_cast<std::uint32_t*>(v_tile + swizzled_offset<kBlockKv>((d0 + j) * kBlockKv + chunk * 16 + 4 * m)) =
        word[j];
  }
}

// ---- main kernel --------------------------------------------------------------------------------

// An int32 accumulator x with |x| < 2^22 (|x| <= 127 * 127 * D here) as a float in one integer add:
// x + 1.5 * 2^23 read as a float is exact and equals 1.5 * 2^23 + x, so x * scale + c is one FFMA of
// it with the bias c - 1.5 * 2^23 * scale (I2F, a quarter-rate instruction, and FMUL would take two).
// Rounding the bias to fp32 leaves an absolute error of at most half a unit of the bias's last place,
// far below the INT8 quantization error of the dot product.
constexpr float kIntToFloatMagic = 12582912.0f;  // 1.5 * 2^23, bit pattern 0x4B400000
__device__ __forceinline__ float magic_float(int x) {
  return __int_as_float(static_cast<int>(static_cast<std::uint32_t>(x) + 0x4B400000u));
}
// A score masked out of the softmax: below every INT8 dot product, so integer maxima skip it, and
// its magic float is -inf (bits 0xFF800000), so its exponential comes out 0 with no test.
constexpr int kMaskedScore = static_cast<int>(0xFF800000u - 0x4B400000u);
// The least dequantization scale: -inf times it stays -inf where a zero scale (an all-zero Q row
// group or K group, whose dot products are all 0 anyway) would make NaN.
constexpr float kMinScale = 1e-30f;

// Four floats to e4m3, first in the lowest byte.
__device__ __forceinline__ std::uint32_t pack_e4m3(float a, float b, float c, float d) {
  const std::uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const std::uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// One k = 32 step of a key block's P~ V8 into the fresh accumulator c.
template <int D>
__device__ __forceinline__ void wgmma_pv(float (&c)[D / 2], const std::uint32_t (&a)[4], std::uint64_t desc,
                                         bool accumulate) {
  if constexpr (D == 128) {
    wgmma_e4m3_m64n128k32(c, a, desc, accumulate);
  } else {
    wgmma_e4m3_m64n64k32(c, a, desc, accumulate);
  }
}

struct SageMain {
  FwdParams p;
  Scratch s;
  int heads_kv;
  float alpha;     // the softmax scale
  float qk_scale;  // alpha * log2(e)
};

// grid (ceil(seq_q / 64), Hq, B), block 128 = one warpgroup of 64 query rows; warp w owns rows
// 16 w .. 16 w + 15 of the block. Per key block of 128: S = Q8 K8^T by wgmma (Q from registers, K from
// shared memory), the softmax in registers, P~ V8 by wgmma (P~ from registers, V^T from shared memory).
// The order within a block: the softmax, with each k32 step of P~ V issued as soon as its 32 keys'
// exponentials are packed; then the next block's Q K^T; O updated under the Q K^T. Another CTA on the
// SM fills the tensor cores during this one's softmax.
template <typename Elem, int D>
__global__ void __launch_bounds__(kMainThreads, kMainCtasPerSm<D>) sage8_fwd_kernel(SageMain m) {
  constexpr int kKT = D / 32;         // k32 steps of Q K^T
  constexpr int kNT = kBlockKv / 8;   // n8 column tiles of S
  constexpr int kPT = kBlockKv / 32;  // k32 steps of P~ V
  constexpr int kDT = D / 8;          // n8 tiles of O
  constexpr int kStg = kStages<D>;
  using Stage = SageStage<D>;
  extern __shared__ std::uint8_t sage_smem[];
  const std::uint32_t smem_base = (smem_addr(sage_smem) + 1023u) & ~1023u;
  const FwdParams& p = m.p;
  const Scratch& s = m.s;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int qb = p.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const std::int64_t bhk = static_cast<std::int64_t>(b) * m.heads_kv + h / p.group;
  const int r0 = qb * kMainRows;
  const int wr0 = r0 + warp * 16;
  const int rows[2] = {wr0 + g, wr0 + g + 8};

  std::uint32_t qa[kKT][4];  // Q8's A fragments, quantized below
  float dq = 0.0f;  // Q's scale times alpha log2(e): one per thread group, so both rows share it
  float lse_off[2] = {0.0f, 0.0f};

  const int n_kb = visited_key_blocks(p, r0, kMainRows, kBlockKv, s.n_kb);

  // Stage pipeline on mbarriers: full[st] completes when tile j's bulk copy (one thread starts it) has
  // landed, empty[st] when the four warps are done with the tile that was there. Tile j sits in stage
  // j % kStg and uses phase (j / kStg) & 1 of both barriers.
  __shared__ alignas(8) std::uint64_t full_bar[kStg], empty_bar[kStg];
  if (tid == 0) {
    for (int st = 0; st < kStg; ++st) {
      mbar_init(smem_addr(&full_bar[st]), 1);
      mbar_init(smem_addr(&empty_bar[st]), kMainThreads / 32);
    }
    mbar_fence_init();
  }
  __syncthreads();
  const std::uint8_t* tile_src = s.tiles + bhk * s.n_kb * Stage::kBytes;
  auto load_tile = [&](int j) {  // thread 0 only
    if (j >= n_kb) return;
    const int st = j % kStg;
    if (j >= kStg) mbar_wait(smem_addr(&empty_bar[st]), (j / kStg - 1) & 1);
    mbar_arrive_expect_tx(smem_addr(&full_bar[st]), Stage::kBytes);
    bulk_copy_to_shared(smem_base + st * Stage::kBytes, tile_src + static_cast<std::int64_t>(j) * Stage::kBytes,
                        Stage::kBytes, smem_addr(&full_bar[st]));
  };
  // This warp is done with tile j (its P~ V has completed): one arrival on the stage's empty barrier.
  auto release = [&](int j) {
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&empty_bar[j % kStg]));
  };

  float o[kDT][4];
#pragma unroll
  for (int i = 0; i < kDT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};  // this thread's part of each row's sum

  // S of one block: 64 values a thread, column 8 (i / 4) + 2 t + i % 2 of row g + 8 ((i % 4) / 2).
  int acc[kBlockKv / 2];
#pragma unroll
  for (int i = 0; i < kBlockKv / 2; ++i) acc[i] = 0;
  // The K scales of the block whose S is in acc, for this thread's two key columns (key mod 8 = 2t,
  // 2t + 1); loaded when its Q K^T is issued, so that the load is covered by the MMAs.
  float dk[2] = {0.0f, 0.0f};
  auto issue_qk = [&](int j) {
    const float* ksc = s.k_scale + (bhk * s.n_kb + j) * 8;
    dk[0] = ksc[2 * t];
    dk[1] = ksc[2 * t + 1];
    const std::uint64_t k_desc = kmajor_desc<D>(smem_base + (j % kStg) * Stage::kBytes);
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) wgmma_s8_m64n128k32(acc, qa[kk], k_desc + 2 * kk, kk > 0);
    wgmma_commit();
  };
  auto wait_full = [&](int j) { mbar_wait(smem_addr(&full_bar[j % kStg]), (j / kStg) & 1); };

  float c[D / 2];  // one key block's P~ V8 (two-level accumulation: a fresh sum per block)
#pragma unroll
  for (int i = 0; i < D / 2; ++i) c[i] = 0.0f;
  std::uint32_t pa[kPT][4];  // P~ in e4m3 as the P~ V MMA's A fragments
  constexpr float kLog2Fp8Max = 8.807354922057604f;  // log2(448): P~ comes out of exp2 already * 448

  // Block kb's softmax on acc, then its P~ V: masking, block maximum, running statistics; then per
  // k32 step of P~ V its 32 keys' exponentials, packed into that step's A fragment and issued at once,
  // so the tensor cores start on P~ V while the later keys' exponentials are computed. Returns the
  // factors that fold P~ V into O. The maximum is taken on the integers (one scale per key column
  // parity, both positive) so that only it is dequantized; each exponent is then one FFMA of the
  // magic float with the block shift folded into the bias.
  auto softmax_and_issue_pv = [&](int kb, float (&ep)[2], float (&ec)[2]) {
    const int key0 = kb * kBlockKv;
    if (block_needs_mask(p, key0, kBlockKv, wr0)) {
      const int limit[2] = {visible_limit(p, rows[0]), visible_limit(p, rows[1])};
#pragma unroll
      for (int i = 0; i < kBlockKv / 2; ++i) {
        if (key0 + (i / 4) * 8 + 2 * t + (i & 1) >= limit[(i >> 1) & 1]) acc[i] = kMaskedScore;
      }
    }
    const float scale[2] = {fmaxf(dq * dk[0], kMinScale), fmaxf(dq * dk[1], kMinScale)};  // by key parity
    const float magic_bias[2] = {-kIntToFloatMagic * scale[0], -kIntToFloatMagic * scale[1]};  // dequantizes
    float bias[2][2];  // [row][parity]: magic_bias less the row's block shift
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      int part[2][kNT / 2];  // [parity]: a tree, not a chain, keeps the pipes busy
#pragma unroll
      for (int par = 0; par < 2; ++par)
#pragma unroll
        for (int nt = 0; nt < kNT / 2; ++nt)
          part[par][nt] = max(acc[4 * nt + 2 * j + par], acc[4 * (nt + kNT / 2) + 2 * j + par]);
#pragma unroll
      for (int w = kNT / 4; w > 0; w /= 2)
#pragma unroll
        for (int par = 0; par < 2; ++par)
#pragma unroll
          for (int i = 0; i < w; ++i) part[par][i] = max(part[par][i], part[par][i + w]);
      float mb = -INFINITY;
#pragma unroll
      for (int par = 0; par < 2; ++par)
        mb = fmaxf(mb, fmaf(magic_float(part[par][0]), scale[par], magic_bias[par]));
      mb = quad_max(mb);
      float shift = 0.0f;
      if (mb == -INFINITY) {  // every key of the block masked for this row: it adds nothing
        ep[j] = 1.0f;
        ec[j] = 0.0f;
      } else {
        const float mn = fmaxf(m_run[j], mb);
        ep[j] = m_run[j] == -INFINITY ? 0.0f : fast_exp2(m_run[j] - mn);
        ec[j] = fast_exp2(mb - mn);
        shift = mb - kLog2Fp8Max;
        m_run[j] = mn;
      }
#pragma unroll
      for (int par = 0; par < 2; ++par) bias[j][par] = magic_bias[par] - shift;
    }
    float part[2][4] = {};  // this block's sum of P~ * 448 per row, in four independent chains
    const std::uint64_t v_desc = kmajor_desc<kBlockKv>(smem_base + (kb % kStg) * Stage::kBytes + Stage::kKBytes);
#pragma unroll
    for (int kc = 0; kc < kPT; ++kc) {
      float e[16];  // n-tiles 4 kc .. 4 kc + 3: the keys of P~ V's k32 step kc
#pragma unroll
      for (int x = 0; x < 16; ++x) {
        const int i = 16 * kc + x, j = (i >> 1) & 1, par = i & 1;
        e[x] = fast_exp2(fmaf(magic_float(acc[i]), scale[par], bias[j][par]));
        part[j][(i / 4) % 2 * 2 + par] += e[x];
      }
      // The A fragment (the key permutation of sage_quant_v).
      pa[kc][0] = pack_e4m3(e[0], e[1], e[4], e[5]);
      pa[kc][1] = pack_e4m3(e[2], e[3], e[6], e[7]);
      pa[kc][2] = pack_e4m3(e[8], e[9], e[12], e[13]);
      pa[kc][3] = pack_e4m3(e[10], e[11], e[14], e[15]);
      wgmma_fence();
      wgmma_pv<D>(c, pa[kc], v_desc + 2 * kc, kc > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float lb = (part[j][0] + part[j][1]) + (part[j][2] + part[j][3]);
      l_run[j] = ep[j] * l_run[j] + ec[j] * lb;
    }
  };

  // O = O ep + c ec; when no row of the warp has a new maximum (ep = 1, the common case once the
  // first blocks are in) the rescale of O is skipped.
  auto fold = [&](const float (&ep)[2], const float (&ec)[2]) {
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

  if (tid == 0)
    for (int i = 0; i < kStg; ++i) load_tile(i);

  // Q quantized here, in registers, while the first tiles load: one INT8 scale per thread group of
  // quant_group(thread, query), rows g and g + 8 of the warp's slab over all D channels, which the
  // four threads of group g hold between them as the wgmma A fragments; rows past seq_q are zeros.
  // With an LSE, also
  // alpha q . mean(K) for both rows (smooth K's correction).
  {
    float x[2][kKT][2][4];  // row j, k32 step kk, half: channels kk 32 + 16 half + 4t + (0..3)
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int kk = 0; kk < kKT; ++kk)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float(&dst)[4] = x[j][kk][half];
          if (rows[j] < p.seq_q) {
            load_vec<Elem, 4>(p.q.data, elem_index(p.q, b, h, rows[j], kk * 32 + 16 * half + 4 * t), dst);
          } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) dst[i] = 0.0f;
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(dst[i]));
        }
    amax = quad_max(amax);
    dq = amax / 127.0f * m.qk_scale;
    const float inv = amax == 0.0f ? 0.0f : 127.0f / amax;  // x * inv: x / scale without a division each
    auto pack = [&](const float (&v4)[4]) {
      std::uint32_t word = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) word |= (static_cast<std::uint32_t>(__float2int_rn(v4[i] * inv)) & 0xffu) << (8 * i);
      return word;
    };
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      qa[kk][0] = pack(x[0][kk][0]);
      qa[kk][1] = pack(x[1][kk][0]);
      qa[kk][2] = pack(x[0][kk][1]);
      qa[kk][3] = pack(x[1][kk][1]);
    }
    if (p.lse != nullptr) {
      const float* mean = s.k_mean + bhk * D;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float dot = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk)
#pragma unroll
          for (int i = 0; i < 8; ++i) dot += x[j][kk][i / 4][i % 4] * mean[kk * 32 + 16 * (i / 4) + 4 * t + i % 4];
        lse_off[j] = m.alpha * quad_sum(dot);
      }
    }
  }

  if (n_kb > 0) {
    wait_full(0);
    wgmma_fence();
    issue_qk(0);
    wgmma_wait<0>();
    wgmma_pin(acc);
  }
  // Every block but the last: its softmax and P~ V, then the next block's Q K^T on the tensor cores
  // while O takes in the P~ V. (The last block is peeled off so that no wgmma is issued
  // conditionally, which would make the compiler serialize them.)
  for (int kb = 0; kb + 1 < n_kb; ++kb) {
    float ep[2], ec[2];
    softmax_and_issue_pv(kb, ep, ec);
    wait_full(kb + 1);
    wgmma_fence();
    issue_qk(kb + 1);
    wgmma_wait<1>();  // this block's P~ V
    wgmma_pin(c);
    wgmma_pin(pa);
    release(kb);
    fold(ep, ec);
    if (tid == 0) load_tile(kb + kStg);  // into kb's stage, once every warp has released it
    wgmma_wait<0>();  // the next block's S
    wgmma_pin(acc);
  }
  if (n_kb > 0) {
    float ep[2], ec[2];
    softmax_and_issue_pv(n_kb - 1, ep, ec);
    wgmma_wait<0>();  // (no release: nothing loads after the last block)
    wgmma_pin(c);
    wgmma_pin(pa);
    fold(ep, ec);
  }

  // Epilogue: O / l * v_scale (both O and l carry the factor 448), the LSE with smooth K's correction.
  const float* vsc = s.v_scale + bhk * D;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float l = quad_sum(l_run[j]);
    const int row = rows[j];
    if (row >= p.seq_q) continue;
    const bool any = l > 0.0f;
    const float inv = any ? 1.0f / l : 0.0f;
    float lse = -INFINITY;
    if (any && p.lse != nullptr) {
      lse = m_run[j] * kLn2 + logf(l) - 6.104793232414985f + lse_off[j];  // - ln 448
    }
    store_lse(p, b, h, row, lse);
    char* out = output_row(p, b, h, row);
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      const int col = dt * 8 + 2 * t;
      const float lo = any ? o[dt][2 * j] * inv * vsc[col] : 0.0f;
      const float hi = any ? o[dt][2 * j + 1] * inv * vsc[col + 1] : 0.0f;
      store_pair(out, p.o_type, col, lo, hi);
    }
  }
}

template <typename Elem, int D>
void launch_typed(const Sage8Request& r, cudaStream_t stream) {
  const FwdParams& p = r.fwd;
  const int B = r.batch, Hq = p.heads_q, Hkv = r.heads_kv;
  Scratch s{};
  s.n_kb = (p.seq_kv + kBlockKv - 1) / kBlockKv;
  s.n_chunk = (p.seq_kv + kStatRows - 1) / kStatRows;
  const std::size_t bhk = static_cast<std::size_t>(B) * Hkv;
  const std::size_t sizes[] = {
      bhk * s.n_kb * SageStage<D>::kBytes,  // tiles
      bhk * s.n_kb * 8 * 4,                 // k_scale
      bhk * D * 4,                          // k_mean
      bhk * D * 4,                          // v_scale
      bhk * s.n_chunk * D * 4,              // k_sum_part
      bhk * s.n_chunk * D * 4,              // v_max_part
  };
  constexpr int kBuffers = sizeof(sizes) / sizeof(sizes[0]);
  std::size_t total = 0;
  for (std::size_t z : sizes) total += align_up(z);
  StreamBuffer scratch(total, r.device, stream);
  char* base = static_cast<char*>(scratch.get());
  void* ptrs[kBuffers];
  for (int i = 0; i < kBuffers; ++i) {
    ptrs[i] = base;
    base += align_up(sizes[i]);
  }
  s.tiles = static_cast<std::uint8_t*>(ptrs[0]);
  s.k_scale = static_cast<float*>(ptrs[1]);
  s.k_mean = static_cast<float*>(ptrs[2]);
  s.v_scale = static_cast<float*>(ptrs[3]);
  s.k_sum_part = static_cast<float*>(ptrs[4]);
  s.v_max_part = static_cast<float*>(ptrs[5]);

  sage_kv_partials<Elem, D><<<dim3(s.n_chunk, Hkv, B), kThreads, 0, stream>>>(p.k, p.v, Hkv, p.seq_kv, s);
  check_launch("sage_kv_partials");
  sage_kv_finalize<D><<<dim3(Hkv, B), D, 0, stream>>>(Hkv, p.seq_kv, s);
  check_launch("sage_kv_finalize");
  sage_quant_k<Elem, D><<<dim3(s.n_kb, Hkv, B), kThreads, 0, stream>>>(p.k, Hkv, p.seq_kv, s);
  check_launch("sage_quant_k");
  sage_quant_v<Elem, D><<<dim3(s.n_kb, Hkv, B), kQuantVThreads<D>, 0, stream>>>(p.v, Hkv, p.seq_kv, s);
  check_launch("sage_quant_v");

  const SageMain m{p, s, Hkv, static_cast<float>(r.alpha), static_cast<float>(r.alpha * 1.4426950408889634)};
  constexpr int kSmem = SageStage<D>::kSmemBytes;
  static OncePerDevice configured;
  configured([&] { set_shared_memory(sage8_fwd_kernel<Elem, D>, kSmem, false, "cudaFuncSetAttribute(sage8_fwd_kernel)"); });
  const int q_blocks = (p.seq_q + kMainRows - 1) / kMainRows;
  sage8_fwd_kernel<Elem, D><<<dim3(q_blocks, Hq, B), kMainThreads, kSmem, stream>>>(m);
  check_launch("sage8_fwd_kernel");
}

template <typename Elem>
void launch_dim(const Sage8Request& r, cudaStream_t stream) {
  if (r.head_dim == 64) {
    launch_typed<Elem, 64>(r, stream);
  } else if (r.head_dim == 128) {
    launch_typed<Elem, 128>(r, stream);
  } else {
    throw Error("sage8 kernel: head dim must be 64 or 128");
  }
}

}  // namespace

void launch_sage8(const Sage8Request& r, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (r.in_type == ElemType::f16) {
    launch_dim<__half>(r, s);
  } else if (r.in_type == ElemType::bf16) {
    launch_dim<__nv_bfloat16>(r, s);
  } else {
    throw Error("sage8 kernel: inputs must be f16 or bf16");
  }
}

}  // namespace pasa::cuda
