// SPDX-License-Identifier: Apache-2.0
// SageAttention2's quantization (the sage8 preset, docs/algorithms.md section 4): the prepass of the
// sage8 kernel (hopper_sage8_mainloop.cuh), into scratch from pasa's stream-ordered pool:
//   1. per (b, h_kv): K's column means (smooth K) and V's per-channel FP8 scales max |V| / 448;
//   2. K - mean quantized to INT8 (sage8) or e4m3 (sage_fp8), one scale per thread group of quant_group(thread, key, s2 = 128):
//      within each key block the 16 rows with the same key mod 8 (the accumulator columns a thread holds);
//   3. V / scale rounded to FP8 e4m3, transposed ([D][keys]) with the keys of every 16-key chunk
//      permuted so that the softmax's C fragments are the PV MMA's A fragments as they are.
//   K8 and V8^T are written tile-major and pre-swizzled (sage8_stage.cuh): each key block's two tiles,
//   byte for byte as the kernel's shared memory holds them, so that a bulk copy brings in each.
// (Q is quantized by the kernel itself, from its shared-memory tile.)
//
// Two forms with the same quantizers (sage8_quantize.cuh: sage_quantize_k_group, sage_quantize_v_quad)
// and statistics (k_mean_of, v_scale_of); K's column sums are added in another order, so the means can differ in
// their last bit:
//   - clustered, for a head whose keys fit in the shared memory of one thread-block cluster (up to
//     kClusterCtas CTAs of kClusterRowBytes) where the device can hold such a cluster: the cluster holds
//     the head's K, then its V (in K's place, or beside it where both fit: then V's copies run under
//     K's work), in shared memory, the CTAs exchange their column sums and maxima through
//     distributed shared memory, and each quantizes what it holds. K and V are read from global memory
//     once (at fp16, 2 bytes read and 1 written per element of K and V, against 4 and 1 in passes).
//   - in passes, for longer heads: partial statistics per kStatRows keys, their reduction, then the K
//     and V quantizers, each a kernel reading global memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/arch/cuda_check.h"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/block/sage8_quantize.cuh"
#include "cuda/block/sage8_stage.cuh"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/once_per_device.h"
#include "cuda/kernels/launch_dispatch.h"

namespace pasa::cuda {
namespace {

namespace cg = cooperative_groups;

using namespace sage8_quantize;

constexpr int kStatRows = 256;           // keys per partial of the K / V statistics (in passes)
constexpr int kThreads = 256;            // the prepass kernels: 8 warps
constexpr int kClusterCtas = 8;          // the portable cluster size
constexpr int kClusterRowBytes = 160 * 1024;  // a clustered CTA's K (then V) rows: whole key blocks

// ---- in passes ------------------------------------------------------------------------------------

// grid (n_chunk, Hkv, B), block kThreads: column sums of K (times kSumScale) and maxima of |V| over one
// chunk of keys.
// Thread (row lane r, 8-channel group cg) reads 16 bytes of K and of V per key, keys r, r + kLanes, ...
// of the chunk; the row lanes then meet in shared memory.
template <typename Elem, int D>
__global__ void __launch_bounds__(kThreads) sage_kv_partials(Operand k, Operand v, int heads_kv, int seq_kv, Sage8Scratch s) {
  constexpr int kGroups = D / 8, kLanes = kThreads / kGroups;
  __shared__ float sum_sh[kLanes][D], max_sh[kLanes][D];
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int cg = threadIdx.x % kGroups, lane_r = threadIdx.x / kGroups;
  const GlobalRows<Elem> k_rows{k, b, h}, v_rows{v, b, h};
  const int r1 = min((c + 1) * kStatRows, seq_kv);
  float sum[8] = {}, vmax[8] = {};
#pragma unroll 4
  for (int r = c * kStatRows + lane_r; r < r1; r += kLanes) {
    float kx[8], vx[8];
    k_rows.load8(r, cg * 8, kx);
    v_rows.load8(r, cg * 8, vx);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      sum[j] = fmaf(kx[j], kSumScale, sum[j]);
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
  s.k_mean[bh * D + d] = k_mean_of(sum, seq_kv);
  s.v_scale[bh * D + d] = v_scale_of(vmax);
}

// grid (n_kb, Hkv, B), block 256: warp w quantizes the group of key block blockIdx.x whose rows are
// w, w + 8, ..., w + 120.
template <class Codes, typename Elem, int D>
__global__ void __launch_bounds__(kThreads) sage_quant_k(Operand k, int heads_kv, int seq_kv, Sage8Scratch s) {
  constexpr int kCols = D / 32;
  const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32;
  const std::int64_t bh = static_cast<std::int64_t>(b) * heads_kv + h;
  float mean[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) mean[j] = s.k_mean[bh * D + lane * kCols + j];
  sage_quantize_k_group<Codes, D>(GlobalRows<Elem>{k, b, h}, kb, threadIdx.x / 32, mean, bh, seq_kv, s);
}

// grid (n_kb, Hkv, B), block kQuads (D / 8) threads: thread (m, chunk, 8-channel group) quantizes
// one quad of key block blockIdx.x.
template <int D>
constexpr int kQuantVThreads = kQuads * (D / 8);

template <typename Elem, int D>
__global__ void __launch_bounds__(kQuantVThreads<D>) sage_quant_v(Operand v, int heads_kv, int seq_kv, Sage8Scratch s) {
  const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int m = threadIdx.x % 4, chunk = threadIdx.x / 4 % kChunks, d0 = threadIdx.x / kQuads * 8;
  const std::int64_t bh = static_cast<std::int64_t>(b) * heads_kv + h;
  Divisor div[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) div[j] = divisor_of(1.0f, s.v_scale[bh * D + d0 + j]);
  sage_quantize_v_quad<D>(GlobalRows<Elem>{v, b, h}, kb, m, chunk, d0, div, bh, seq_kv, s);
}

// ---- clustered --------------------------------------------------------------------------------------

// Issues the copies of keys key0 .. key0 + n_rows - 1 of `op` into `rows` (cp.async, 16 bytes a thread
// at a time) as one commit group of each thread.
template <typename Elem, int D>
__device__ __forceinline__ void copy_rows(const Operand& op, int b, int h, int n_rows, const SharedRows<Elem, D>& rows) {
  constexpr int kRowChunks = D / 8;
  for (int i = threadIdx.x; i < n_rows * kRowChunks; i += kThreads) {
    const int r = i / kRowChunks, d0 = i % kRowChunks * 8;
    const Elem* src = static_cast<const Elem*>(op.data) + elem_index(op, b, h, rows.key0 + r, d0);
    cp_async_16(smem_addr(rows.base + SharedRows<Elem, D>::offset(r, d0)), src, true);
  }
  cp_async_commit();
}

// This CTA's column sums (kMax false; of x * kSumScale) or maxima of |x| (kMax true) over its n_rows rows
// into out[D]
// (thread (row lane, 8-channel group) over rows lane, lane + kLanes, ...; the lanes meet in `lanes`).
template <bool kMax, typename Elem, int D>
__device__ __forceinline__ void column_stat(const SharedRows<Elem, D>& rows, int n_rows,
                                            float (&lanes)[kThreads / (D / 8)][D], float* out) {
  constexpr int kGroups = D / 8, kLanes = kThreads / kGroups;
  const int cg = threadIdx.x % kGroups, lane_r = threadIdx.x / kGroups;
  float acc[8] = {};
  for (int r = lane_r; r < n_rows; r += kLanes) {
    float x[8];
    rows.load8(rows.key0 + r, cg * 8, x);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = kMax ? fmaxf(acc[j], fabsf(x[j])) : fmaf(x[j], kSumScale, acc[j]);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) lanes[lane_r][cg * 8 + j] = acc[j];
  __syncthreads();
  const int d = threadIdx.x;
  if (d < D) {
    float total = 0.0f;
    for (int i = 0; i < kLanes; ++i) total = kMax ? fmaxf(total, lanes[i][d]) : total + lanes[i][d];
    out[d] = total;
  }
}

// grid (cluster size, Hkv, B), one cluster a head, block kThreads, dynamic shared memory
// blocks_per_cta key blocks of rows (twice that with v_apart): CTA `rank` holds key blocks
// rank * blocks_per_cta onwards. It copies its K rows, sums their columns, and after a cluster barrier
// every CTA adds the cluster's sums (in rank order, so all agree on the mean) and quantizes its K
// blocks; then the same for V with maxima. With v_apart V's rows have their own place after K's, so
// V's copies are issued with K's and land while K is summed and quantized; without, they reuse K's.
template <class Codes, typename Elem, int D>
__global__ void __launch_bounds__(kThreads, 3) sage_kv_prepare_clustered(Operand k, Operand v, int heads_kv, int seq_kv,
                                                                      int blocks_per_cta, bool v_apart, Sage8Scratch s) {
  constexpr int kCols = D / 32;
  extern __shared__ __align__(128) std::uint8_t rows_sh[];
  __shared__ float lanes_sh[kThreads / (D / 8)][D];
  __shared__ float k_sum_sh[D], v_max_sh[D];  // this CTA's statistics, read by the whole cluster
  __shared__ float mean_sh[D];
  __shared__ Divisor v_div_sh[D];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank()), ranks = static_cast<int>(cluster.num_blocks());
  const int h = blockIdx.y, b = blockIdx.z;
  const std::int64_t bh = static_cast<std::int64_t>(b) * heads_kv + h;
  const int kb0 = rank * blocks_per_cta, kb1 = min(kb0 + blocks_per_cta, s.n_kb);
  const SharedRows<Elem, D> rows{reinterpret_cast<Elem*>(rows_sh), kb0 * kBlockKv};
  const SharedRows<Elem, D> v_rows{rows.base + (v_apart ? blocks_per_cta * kBlockKv * D : 0), rows.key0};
  const int n_rows = min(kb1 * kBlockKv, seq_kv) - rows.key0;
  const int d = threadIdx.x;

  copy_rows<Elem, D>(k, b, h, n_rows, rows);
  if (v_apart) {
    copy_rows<Elem, D>(v, b, h, n_rows, v_rows);
    cp_async_wait<1>();  // (K's group; V's may still be in flight)
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
  column_stat<false>(rows, n_rows, lanes_sh, k_sum_sh);
  cluster.sync();
  if (d < D) {
    double sum = 0.0;
    for (int r = 0; r < ranks; ++r) sum += *cluster.map_shared_rank(&k_sum_sh[d], r);
    mean_sh[d] = k_mean_of(sum, seq_kv);
    if (rank == 0) s.k_mean[bh * D + d] = mean_sh[d];
  }
  __syncthreads();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  float mean[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) mean[j] = mean_sh[lane * kCols + j];
  for (int kb = kb0; kb < kb1; ++kb) sage_quantize_k_group<Codes, D>(rows, kb, w, mean, bh, seq_kv, s);

  if (!v_apart) {
    __syncthreads();  // (every K row read before V's copies overwrite them)
    copy_rows<Elem, D>(v, b, h, n_rows, v_rows);
  }
  cp_async_wait<0>();
  __syncthreads();
  column_stat<true>(v_rows, n_rows, lanes_sh, v_max_sh);
  cluster.sync();
  if (d < D) {
    float vmax = 0.0f;
    for (int r = 0; r < ranks; ++r) vmax = fmaxf(vmax, *cluster.map_shared_rank(&v_max_sh[d], r));
    const float scale = v_scale_of(vmax);
    v_div_sh[d] = divisor_of(1.0f, scale);
    if (rank == 0) s.v_scale[bh * D + d] = scale;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < (kb1 - kb0) * kQuantVThreads<D>; i += kThreads) {
    const int kb = kb0 + i / kQuantVThreads<D>, t = i % kQuantVThreads<D>;
    const int m = t % 4, chunk = t / 4 % kChunks, d0 = t / kQuads * 8;
    Divisor div[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) div[j] = v_div_sh[d0 + j];
    sage_quantize_v_quad<D>(v_rows, kb, m, chunk, d0, div, bh, seq_kv, s);
  }
  cluster.sync();  // (no CTA leaves while another may still read its v_max_sh)
}

// The scratch's buffers in order, each aligned (align_up): tiles, k_scale, k_mean, v_scale, k_sum_part,
// v_max_part (the last two written by the form in passes only; planned for every call, a few KB a
// head, so that the plan does not depend on which form the device runs).
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

template <int D>
constexpr int kBlockRowBytes = kBlockKv * D * kElemBytes;  // one key block's rows

// The clustered launch of a head of n_kb key blocks: the fewest key blocks a CTA with at most
// kClusterCtas CTAs a cluster; V's rows apart from K's where both fit in kApartRowBytes (so a CTA
// that holds V apart takes no more shared memory than the three CTAs an SM of __launch_bounds__ leave
// it) and within the device's limit of key blocks a CTA (`block_limit`).
constexpr int kApartRowBytes = 64 * 1024;

struct ClusterShape {
  int ctas, blocks_per_cta;
  bool v_apart;
  int row_blocks() const { return v_apart ? 2 * blocks_per_cta : blocks_per_cta; }
};

template <int D>
ClusterShape cluster_shape(int n_kb, int block_limit) {
  const int per_cta = (n_kb + kClusterCtas - 1) / kClusterCtas;
  const bool v_apart = 2 * per_cta * kBlockRowBytes<D> <= kApartRowBytes && 2 * per_cta <= block_limit;
  return {(n_kb + per_cta - 1) / per_cta, per_cta, v_apart};
}

template <typename Elem, int D>
cudaLaunchConfig_t clustered_config(const Sage8Request& r, const ClusterShape& shape, cudaLaunchAttribute& cluster,
                                    cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(shape.ctas, r.heads_kv, r.batch);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<std::size_t>(shape.row_blocks()) * kBlockRowBytes<D>;
  config.stream = stream;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = shape.ctas;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return config;
}

// The most key blocks a clustered CTA may hold on the current device: kClusterRowBytes' worth where a
// cluster of kClusterCtas such CTAs can be resident, fewer where it cannot (a device or MPS client with
// fewer SMs a GPC, or less shared memory), 0 where not even one block's can. Asked once per device
// (the occupancy queries are driver calls), and the shared-memory limit set then too.
template <class Codes, typename Elem, int D>
int clustered_block_limit(const Sage8Request& r) {
  static OncePerDevice configured;
  static int limit[OncePerDevice::kMaxDevices];
  const int device = configured([&] {
    auto* kernel = sage_kv_prepare_clustered<Codes, Elem, D>;
    set_shared_memory(kernel, kClusterRowBytes, true, "cudaFuncSetAttribute(sage_kv_prepare_clustered)");
    int fits = 0;
    for (int blocks = kClusterRowBytes / kBlockRowBytes<D>; blocks > 0 && fits == 0; --blocks) {
      cudaLaunchAttribute cluster{};
      const cudaLaunchConfig_t config =
          clustered_config<Elem, D>(r, {kClusterCtas, blocks, false}, cluster, static_cast<cudaStream_t>(nullptr));
      int clusters = 0;
      const cudaError_t status = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
      if (status != cudaSuccess) cudaGetLastError();  // (counted as no room: the form in passes runs)
      if (status == cudaSuccess && clusters > 0) fits = blocks;
    }
    int current = 0;
    check_cuda(cudaGetDevice(&current), "cudaGetDevice");
    limit[current] = fits;
  });
  return limit[device];
}

template <class Codes, typename Elem, int D>
void launch_clustered(const Sage8Request& r, const Sage8Scratch& s, const ClusterShape& shape, cudaStream_t stream) {
  const FwdParams& p = r.fwd;
  cudaLaunchAttribute cluster{};
  const cudaLaunchConfig_t config = clustered_config<Elem, D>(r, shape, cluster, stream);
  const cudaError_t status = cudaLaunchKernelEx(&config, sage_kv_prepare_clustered<Codes, Elem, D>, p.k, p.v, r.heads_kv,
                                                p.seq_kv, shape.blocks_per_cta, shape.v_apart, s);
  if (status != cudaSuccess) cudaGetLastError();  // (a launch error is not the next launch's to report)
  check_cuda(status, "sage_kv_prepare_clustered");
}

template <class Codes, typename Elem, int D>
void launch_in_passes(const Sage8Request& r, const Sage8Scratch& s, cudaStream_t stream) {
  const FwdParams& p = r.fwd;
  const int B = r.batch, Hkv = r.heads_kv;
  sage_kv_partials<Elem, D><<<dim3(s.n_chunk, Hkv, B), kThreads, 0, stream>>>(p.k, p.v, Hkv, p.seq_kv, s);
  check_launch("sage_kv_partials");
  sage_kv_finalize<D><<<dim3(Hkv, B), D, 0, stream>>>(Hkv, p.seq_kv, s);
  check_launch("sage_kv_finalize");
  sage_quant_k<Codes, Elem, D><<<dim3(s.n_kb, Hkv, B), kThreads, 0, stream>>>(p.k, Hkv, p.seq_kv, s);
  check_launch("sage_quant_k");
  sage_quant_v<Elem, D><<<dim3(s.n_kb, Hkv, B), kQuantVThreads<D>, 0, stream>>>(p.v, Hkv, p.seq_kv, s);
  check_launch("sage_quant_v");
}

template <class Codes, typename Elem, int D>
void launch_typed(const Sage8Request& r, const Sage8Scratch& s, cudaStream_t stream) {
  static_assert(sizeof(Elem) == kElemBytes);
  // (n_kb <= kClusterCtas * the limit, compared without forming a byte count that could overflow)
  const int block_limit = clustered_block_limit<Codes, Elem, D>(r);
  if (s.n_kb >= 1 && (s.n_kb - 1) / kClusterCtas < block_limit) {
    launch_clustered<Codes, Elem, D>(r, s, cluster_shape<D>(s.n_kb, block_limit), stream);
  } else {
    launch_in_passes<Codes, Elem, D>(r, s, stream);
  }
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
  dispatch_qk_codes(r.qk_codes, [&]<class Codes>() {
    dispatch_16bit(r.in_type, "sage8 kernel", [&]<typename Elem>() {
      dispatch_head_dim<64, 128>(r.head_dim, "sage8 kernel", [&]<int D>() {
        launch_typed<Codes, Elem, D>(r, s, static_cast<cudaStream_t>(stream));
      });
    });
  });
  return s;
}

}  // namespace pasa::cuda
