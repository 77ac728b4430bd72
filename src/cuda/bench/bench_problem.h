// SPDX-License-Identifier: Apache-2.0
// One benchmark point on the device, shared by the timing (bench_timing.cu) and the host-overhead
// (bench_host_gpu.cpp) benchmarks: seeded uniform Q, K, V (device_fill.h), O and the LSE, a
// non-blocking stream of its own, and the AttentionArgs that name them. Everything is released on
// every path out.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/device_fill.h"
#include "pasa/attention.h"
#include "pasa/bench.h"

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

class BenchProblem {
 public:
  // Q, K and V filled with seeds seed, seed + 1 and seed + 2 (fp16 or bf16: pt.dtype).
  BenchProblem(const BenchPoint& pt, std::uint64_t seed)
      : q_(q_elems(pt) * 2),
        k_(kv_elems(pt) * 2),
        v_(kv_elems(pt) * 2),
        o_(q_elems(pt) * 2),
        lse_(static_cast<std::size_t>(pt.batch) * pt.heads_q * pt.seq_q * sizeof(float)) {
    cuda::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const bool bf16 = pt.dtype == DType::bf16;
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(q_.ptr), q_elems(pt), seed, bf16, stream_);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(k_.ptr), kv_elems(pt), seed + 1, bf16, stream_);
    cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(v_.ptr), kv_elems(pt), seed + 2, bf16, stream_);
    args_.q = bhsd_view(q_.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
    args_.k = bhsd_view(k_.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
    args_.v = bhsd_view(v_.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
    args_.o = bhsd_view(o_.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
    args_.lse = lse_view(static_cast<float*>(lse_.ptr), pt.batch, pt.heads_q, pt.seq_q, Device::cuda);
    args_.causal = pt.causal;
    args_.policy = pt.policy;
    args_.backend = Backend::cuda;
    args_.stream = stream_;
  }
  ~BenchProblem() { cudaStreamDestroy(stream_); }
  BenchProblem(const BenchProblem&) = delete;
  BenchProblem& operator=(const BenchProblem&) = delete;

  const AttentionArgs& args() const { return args_; }
  cudaStream_t stream() const { return stream_; }

 private:
  static std::int64_t q_elems(const BenchPoint& pt) {
    return std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * pt.head_dim;
  }
  static std::int64_t kv_elems(const BenchPoint& pt) {
    return std::int64_t{pt.batch} * pt.heads_kv * pt.seq_kv * pt.head_dim;
  }

  DeviceMemory q_, k_, v_, o_, lse_;
  cudaStream_t stream_ = nullptr;
  AttentionArgs args_;
};

}  // namespace pasa
