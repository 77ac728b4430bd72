// SPDX-License-Identifier: Apache-2.0
// SageAttention2's quantization (the sage8 preset, docs/algorithms.md section 4): the prepass of the
// sage8 kernel (hopper_sage8_mainloop.cuh), into scratch from pasa's stream-ordered pool:
//   1. per (b, h_kv): partial column sums of K and column maxima of |V| over chunks of kStatRows keys,
//      then the K mean (smooth K) and V's per-channel FP8 scale max|V| / 448;
//   2. K - mean quantized to INT8, one scale per thread group of quant_group(thread, key, s2 = 128):
//      within each key block the 16 rows with the same key mod 8 (the accumulator columns a thread holds);
//   3. V / scale rounded to FP8 e4m3, transposed ([D][keys]) with the keys of every 16-key chunk
//      permuted so that the softmax's C fragments are the PV MMA's A fragments as they are.
//   K8 and V8^T are written tile-major and pre-swizzled (sage8_stage.cuh): each key block's two tiles,
//   byte for byte as the kernel's shared memory holds them, so that a bulk copy brings in each.
// (Q is quantized by the kernel itself, from its shared-memory tile.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/arch/cuda_check.h"
#include "cuda/arch/wgmma.cuh"
#include "cuda/block/sage8_stage.cuh"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/kernels/launch_dispatch.h"

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

// ---- prepass ------------------------------------------------------------------------------------

// grid (n_chunk, Hkv, B), block kThreads: column sums of K and maxima of |V| over one chunk of keys.
// Thread (row lane r, 8-channel group cg) reads 16 bytes of K and of V per key, keys r, r + kLanes, ...
// of the chunk; the row lanes then meet in shared memory.
template <typename Elem, int D>
__global__ void __launch_bounds__(kThreads) sage_kv_partials(Operand k, Operand v, int heads_kv, int seq_kv, Sage8Scratch s) {
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
__global__ void __launch_bounds__(D) sage_kv_finalize(int heads_kv, int seq_kv, Sage8Scratch s) {
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
__global__ void __launch_bounds__(kThreads) sage_quant_k(Operand k, int heads_kv, int seq_kv, Sage8Scratch s) {
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
__global__ void __launch_bounds__(kQuantVThreads<D>) sage_quant_v(Operand v, int heads_kv, int seq_kv, Sage8Scratch s) {
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


// The scratch's buffers in order, each aligned (align_up): tiles, k_scale, k_mean, v_scale, k_sum_part,
// v_max_part.
struct ScratchPlan {
  std::size_t sizes[6];
  int n_kb, n_chunk;
};

ScratchPlan scratch_plan(const Sage8Request& r) {
  const int D = r.head_dim, seq_kv = r.fwd.seq_kv;
  ScratchPlan plan{};
  plan.n_kb = (seq_kv + kBlockKv - 1) / kBlockKv;
  plan.n_chunk = (seq_kv + kStatRows - 1) / kStatRows;
  const std::size_t bhk = static_cast<std::size_t>(r.batch) * r.heads_kv;
  const std::size_t stage = 2 * static_cast<std::size_t>(kBlockKv) * D;
  const std::size_t sizes[] = {bhk * plan.n_kb * stage, bhk * plan.n_kb * 8 * 4, bhk * D * 4, bhk * D * 4,
                               bhk * plan.n_chunk * D * 4, bhk * plan.n_chunk * D * 4};
  for (int i = 0; i < 6; ++i) plan.sizes[i] = sizes[i];
  return plan;
}

template <typename Elem, int D>
void launch_typed(const Sage8Request& r, const Sage8Scratch& s, cudaStream_t stream) {
  const FwdParams& p = r.fwd;
  const int B = r.batch, Hkv = r.heads_kv;
  sage_kv_partials<Elem, D><<<dim3(s.n_chunk, Hkv, B), kThreads, 0, stream>>>(p.k, p.v, Hkv, p.seq_kv, s);
  check_launch("sage_kv_partials");
  sage_kv_finalize<D><<<dim3(Hkv, B), D, 0, stream>>>(Hkv, p.seq_kv, s);
  check_launch("sage_kv_finalize");
  sage_quant_k<Elem, D><<<dim3(s.n_kb, Hkv, B), kThreads, 0, stream>>>(p.k, Hkv, p.seq_kv, s);
  check_launch("sage_quant_k");
  sage_quant_v<Elem, D><<<dim3(s.n_kb, Hkv, B), kQuantVThreads<D>, 0, stream>>>(p.v, Hkv, p.seq_kv, s);
  check_launch("sage_quant_v");
}

}  // namespace

std::size_t sage8_scratch_bytes(const Sage8Request& r) {
  std::size_t total = 0;
  for (std::size_t z : scratch_plan(r).sizes) total += align_up(z);
  return total;
}

Sage8Scratch launch_sage8_prepass(const Sage8Request& r, void* scratch, void* stream) {
  const ScratchPlan plan = scratch_plan(r);
  char* base = static_cast<char*>(scratch);
  void* ptrs[6];
  for (int i = 0; i < 6; ++i) {
    ptrs[i] = base;
    base += align_up(plan.sizes[i]);
  }
  const Sage8Scratch s{static_cast<std::uint8_t*>(ptrs[0]), static_cast<float*>(ptrs[1]), static_cast<float*>(ptrs[2]),
                       static_cast<float*>(ptrs[3]),        static_cast<float*>(ptrs[4]), static_cast<float*>(ptrs[5]),
                       plan.n_kb,                           plan.n_chunk};
  dispatch_16bit(r.in_type, "sage8 kernel", [&]<typename Elem>() {
    dispatch_head_dim<64, 128>(r.head_dim, "sage8 kernel", [&]<int D>() {
      launch_typed<Elem, D>(r, s, static_cast<cudaStream_t>(stream));
    });
  });
  return s;
}

}  // namespace pasa::cuda
