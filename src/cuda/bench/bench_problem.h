// SPDX-License-Identifier: Apache-2.0
// One benchmark point on the device, shared by the timing (bench_timing.cu) and the host-overhead
// (bench_host_gpu.cpp) benchmarks: seeded uniform Q, K, V (device_fill.h), O and the LSE, a
// non-blocking stream of its own, and the AttentionArgs that name them; or, for a KV-cache point
// (BenchPoint::kv_cache_block), the cache, its lengths and block table and the KVCacheArgs. Everything
// is released on every path out.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/device_fill.h"
#include "pasa/attention.h"
#include "pasa/bench.h"
#include "pasa/serving.h"

namespace pasa {

struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(std::size_t bytes) {
    const cudaError_t status = cudaMalloc(&ptr, std::max<std::size_t>(bytes, 1));
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw ResourceError("pasa bench: the point's tensors (" + std::to_string(bytes) +
                          " bytes) do not fit in the GPU's free memory");
    }
    cuda::check_cuda(status, "cudaMalloc (bench)");
  }
  ~DeviceMemory() { cudaFree(ptr); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

// A non-blocking stream for one benchmark point, destroyed with it.
class BenchStream {
 public:
  BenchStream() { cuda::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~BenchStream() { cudaStreamDestroy(stream_); }
  BenchStream(const BenchStream&) = delete;
  BenchStream& operator=(const BenchStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The point's options (mask, policy) for a call on the CUDA backend on `stream`.
inline void set_bench_options(AttentionArgs& a, const BenchPoint& pt, cudaStream_t stream) {
  a.causal = pt.causal;
  a.policy = pt.policy;
  a.backend = Backend::cuda;
  a.stream = stream;
}

class BenchProblem {
 public:
  // Q, K and V filled with seeds seed, seed + 1 and seed + 2 (fp16 or bf16: pt.dtype).
  BenchProblem(const BenchPoint& pt, std::uint64_t seed)
      : q_(q_elems(pt) * 2),
        k_(kv_elems(pt) * 2),
        v_(kv_elems(pt) * 2),
        o_(q_elems(pt) * 2),
        lse_(static_cast<std::size_t>(pt.batch) * pt.heads_q * pt.seq_q * sizeof(float)) {
    const cudaStream_t st = stream();
    const bool bf16 = pt.dtype == DType::bf16;
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(q_.ptr), q_elems(pt), seed, bf16, st);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(k_.ptr), kv_elems(pt), seed + 1, bf16, st);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(v_.ptr), kv_elems(pt), seed + 2, bf16, st);
    args_.q = bhsd_view(q_.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
    args_.k = bhsd_view(k_.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
    args_.v = bhsd_view(v_.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
    args_.o = bhsd_view(o_.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
    args_.lse = lse_view(static_cast<float*>(lse_.ptr), pt.batch, pt.heads_q, pt.seq_q, Device::cuda);
    set_bench_options(args_, pt, st);
  }

  const AttentionArgs& args() const { return args_; }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  static std::int64_t q_elems(const BenchPoint& pt) {
    return std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * pt.head_dim;
  }
  static std::int64_t kv_elems(const BenchPoint& pt) {
    return std::int64_t{pt.batch} * pt.heads_kv * pt.seq_kv * pt.head_dim;
  }

  DeviceMemory q_, k_, v_, o_, lse_;
  BenchStream stream_;
  AttentionArgs args_;
};

// A decode point's KV cache (pt.kv_cache_block >= 0): Q [B, Hq, Sq, D], K and V caches of B Skv
// positions (seeded uniform values), every sequence's length Skv, and for a paged cache a block table
// that deals the pool's blocks out in a seeded random order.
class BenchKVCache {
 public:
  BenchKVCache(const BenchPoint& pt, std::uint64_t seed)
      : positions_(std::int64_t{pt.batch} * pt.seq_kv),
        q_(std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * pt.head_dim * 2),
        k_(positions_ * pt.heads_kv * pt.head_dim * 2),
        v_(positions_ * pt.heads_kv * pt.head_dim * 2),
        o_(std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * pt.head_dim * 2),
        lse_(std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * sizeof(float)),
        seqlens_(pt.batch * sizeof(std::int32_t)),
        table_(std::max<std::int64_t>(blocks(pt), 1) * sizeof(std::int32_t)) {
    const cudaStream_t st = stream();
    const bool bf16 = pt.dtype == DType::bf16;
    const std::int64_t kv_elems = positions_ * pt.heads_kv * pt.head_dim;
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(q_.ptr), std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * pt.head_dim,
                             seed, bf16, st);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(k_.ptr), kv_elems, seed + 1, bf16, st);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(v_.ptr), kv_elems, seed + 2, bf16, st);
    const std::vector<std::int32_t> lengths(pt.batch, pt.seq_kv);
    cuda::check_cuda(cudaMemcpyAsync(seqlens_.ptr, lengths.data(), lengths.size() * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, st), "cudaMemcpyAsync (cache_seqlens)");
    const int block = pt.kv_cache_block;
    // The cache in flash-attn's [rows, positions, Hkv, D]: B rows of Skv positions, or the pool's blocks.
    const std::int64_t rows = block > 0 ? blocks(pt) : pt.batch, per_row = block > 0 ? block : pt.seq_kv;
    args_.k_cache = bshd_view(k_.ptr, pt.dtype, rows, per_row, pt.heads_kv, pt.head_dim, Device::cuda);
    args_.v_cache = bshd_view(v_.ptr, pt.dtype, rows, per_row, pt.heads_kv, pt.head_dim, Device::cuda);
    if (block > 0) {
      std::vector<std::int32_t> table(blocks(pt));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937_64(seed + 3));
      cuda::check_cuda(cudaMemcpyAsync(table_.ptr, table.data(), table.size() * sizeof(std::int32_t),
                                       cudaMemcpyHostToDevice, st), "cudaMemcpyAsync (block_table)");
      args_.block_table = static_cast<const std::int32_t*>(table_.ptr);
      args_.max_blocks = pt.seq_kv / block;
    }
    cuda::check_cuda(cudaStreamSynchronize(st), "cudaStreamSynchronize (bench KV cache)");
    args_.q = bhsd_view(q_.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
    args_.o = bhsd_view(o_.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
    args_.lse = lse_view(static_cast<float*>(lse_.ptr), pt.batch, pt.heads_q, pt.seq_q, Device::cuda);
    args_.cache_seqlens = static_cast<const std::int32_t*>(seqlens_.ptr);
    set_bench_options(args_.options, pt, st);
  }

  const KVCacheArgs& args() const { return args_; }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  // A paged cache's blocks (0 for a dense one); the block size must be a power of two dividing Skv.
  static std::int64_t blocks(const BenchPoint& pt) {
    const int block = pt.kv_cache_block;
    if (block <= 0) return 0;
    if ((block & (block - 1)) != 0 || pt.seq_kv % block != 0) {
      throw Error("pasa bench: a paged cache's block size must be a power of two dividing S_kv " +
                  std::to_string(pt.seq_kv) + ", not " + std::to_string(block));
    }
    return std::int64_t{pt.batch} * pt.seq_kv / block;
  }

  std::int64_t positions_;
  DeviceMemory q_, k_, v_, o_, lse_, seqlens_, table_;
  BenchStream stream_;
  KVCacheArgs args_;
};

}  // namespace pasa
