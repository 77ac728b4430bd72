// SPDX-License-Identifier: Apache-2.0
// One benchmark point on the device, shared by the timing (bench_timing.cu) and the host-overhead
// (bench_host_gpu.cpp) benchmarks: seeded uniform Q, K, V (device_fill.h), O, the LSE and a
// non-blocking stream (BenchInputs), named by AttentionArgs (BenchProblem) or, for a KV-cache point
// (BenchPoint::kv_cache_block), by KVCacheArgs with the cache's lengths and block table
// (BenchKVCache). Everything is released on every path out.
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

// What every point has on the device: Q [B, Hq, Sq, D] and K, V of B Skv Hkv D elements (a dense
// tensor's or a full KV cache's), filled with seeded uniform values (seeds seed, seed + 1, seed + 2;
// fp16 or bf16: pt.dtype), O and the LSE, and a non-blocking stream of its own.
class BenchInputs {
 public:
  BenchInputs(const BenchPoint& pt, std::uint64_t seed)
      : q(q_elems(pt) * 2),
        k(kv_elems(pt) * 2),
        v(kv_elems(pt) * 2),
        o(q_elems(pt) * 2),
        lse(std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * sizeof(float)) {
    cuda::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const bool bf16 = pt.dtype == DType::bf16;
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(q.ptr), q_elems(pt), seed, bf16, stream);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(k.ptr), kv_elems(pt), seed + 1, bf16, stream);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(v.ptr), kv_elems(pt), seed + 2, bf16, stream);
  }
  ~BenchInputs() { cudaStreamDestroy(stream); }
  BenchInputs(const BenchInputs&) = delete;
  BenchInputs& operator=(const BenchInputs&) = delete;

  // Q's and O's views [B, Hq, Sq, D], the LSE's [B, Hq, Sq].
  TensorView q_view(const BenchPoint& pt) const {
    return bhsd_view(q.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
  }
  TensorView o_view(const BenchPoint& pt) const {
    return bhsd_view(o.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
  }
  LseView lse_of(const BenchPoint& pt) const {
    return lse_view(static_cast<float*>(lse.ptr), pt.batch, pt.heads_q, pt.seq_q, Device::cuda);
  }
  // The point's options: its mask and policy, the CUDA backend, this stream.
  void set_options(AttentionArgs& a, const BenchPoint& pt) const {
    a.causal = pt.causal;
    a.policy = pt.policy;
    a.backend = Backend::cuda;
    a.stream = stream;
  }

  DeviceMemory q, k, v, o, lse;
  cudaStream_t stream = nullptr;

 private:
  static std::int64_t q_elems(const BenchPoint& pt) {
    return std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * pt.head_dim;
  }
  static std::int64_t kv_elems(const BenchPoint& pt) {
    return std::int64_t{pt.batch} * pt.heads_kv * pt.seq_kv * pt.head_dim;
  }
};

// A point on dense tensors: K and V [B, Hkv, Skv, D], through pasa::attention.
class BenchProblem {
 public:
  BenchProblem(const BenchPoint& pt, std::uint64_t seed) : in_(pt, seed) {
    args_.q = in_.q_view(pt);
    args_.o = in_.o_view(pt);
    args_.lse = in_.lse_of(pt);
    in_.set_options(args_, pt);
    args_.k = bhsd_view(in_.k.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
    args_.v = bhsd_view(in_.v.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
  }

  const AttentionArgs& args() const { return args_; }
  cudaStream_t stream() const { return in_.stream; }

 private:
  BenchInputs in_;
  AttentionArgs args_;
};

// A decode point's KV cache (pt.kv_cache_block >= 0): K and V caches of B Skv positions, every
// sequence's length Skv, and for a paged cache a block table that deals the pool's blocks out in a
// seeded random order.
class BenchKVCache {
 public:
  BenchKVCache(const BenchPoint& pt, std::uint64_t seed)
      : in_(pt, seed),
        seqlens_(pt.batch * sizeof(std::int32_t)),
        table_(std::max<std::int64_t>(blocks(pt), 1) * sizeof(std::int32_t)) {
    args_.q = in_.q_view(pt);
    args_.o = in_.o_view(pt);
    args_.lse = in_.lse_of(pt);
    in_.set_options(args_.options, pt);
    const std::vector<std::int32_t> lengths(pt.batch, pt.seq_kv);
    cuda::check_cuda(cudaMemcpyAsync(seqlens_.ptr, lengths.data(), lengths.size() * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, in_.stream), "cudaMemcpyAsync (cache_seqlens)");
    args_.cache_seqlens = static_cast<const std::int32_t*>(seqlens_.ptr);
    const int block = pt.kv_cache_block;
    // The cache in flash-attn's [rows, positions, Hkv, D]: B rows of Skv positions, or the pool's blocks.
    const std::int64_t rows = block > 0 ? blocks(pt) : pt.batch, per_row = block > 0 ? block : pt.seq_kv;
    args_.k_cache = bshd_view(in_.k.ptr, pt.dtype, rows, per_row, pt.heads_kv, pt.head_dim, Device::cuda);
    args_.v_cache = bshd_view(in_.v.ptr, pt.dtype, rows, per_row, pt.heads_kv, pt.head_dim, Device::cuda);
    std::vector<std::int32_t> table(blocks(pt));
    if (block > 0) {
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937_64(seed + 3));
      cuda::check_cuda(cudaMemcpyAsync(table_.ptr, table.data(), table.size() * sizeof(std::int32_t),
                                       cudaMemcpyHostToDevice, in_.stream), "cudaMemcpyAsync (block_table)");
      args_.block_table = static_cast<const std::int32_t*>(table_.ptr);
      args_.max_blocks = pt.seq_kv / block;
    }
    // (before `lengths` and `table`, which the copies read, go)
    cuda::check_cuda(cudaStreamSynchronize(in_.stream), "cudaStreamSynchronize (bench KV cache)");
  }

  const KVCacheArgs& args() const { return args_; }
  cudaStream_t stream() const { return in_.stream; }

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

  BenchInputs in_;
  DeviceMemory seqlens_, table_;
  KVCacheArgs args_;
};

}  // namespace pasa
