// SPDX-License-Identifier: Apache-2.0
// bench_host_overhead on the GPU: the host's time per queued call, eager and through a plan.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/device_fill.h"
#include "cuda_backend.h"
#include "host_timing.h"
#include "pasa/attention_plan.h"

namespace pasa {
namespace {

struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(std::size_t bytes) {
    cuda::check_cuda(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
  }
  ~DeviceMemory() { cudaFree(ptr); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

}  // namespace

HostOverhead bench_host_overhead_gpu(const BenchPoint& pt, int calls) {
  if (!cuda_backend_available()) {
    throw Error("the GPU host-overhead benchmark needs a GPU of compute capability 8.0 or newer");
  }
  if (pt.dtype == DType::f32) throw Error("dtype: the kernels take fp16 or bf16");
  const std::int64_t q_elems = std::int64_t{pt.batch} * pt.heads_q * pt.seq_q * pt.head_dim;
  const std::int64_t kv_elems = std::int64_t{pt.batch} * pt.heads_kv * pt.seq_kv * pt.head_dim;
  DeviceMemory q(q_elems * 2), k(kv_elems * 2), v(kv_elems * 2), o(q_elems * 2);
  DeviceMemory lse(static_cast<std::size_t>(pt.batch) * pt.heads_q * pt.seq_q * sizeof(float));
  cudaStream_t stream = nullptr;
  cuda::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};
  const bool bf16 = pt.dtype == DType::bf16;
  cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(q.ptr), q_elems, 1, bf16, stream);
  cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(k.ptr), kv_elems, 2, bf16, stream);
  cuda::fill_uniform_16bit(static_cast<std::uint16_t*>(v.ptr), kv_elems, 3, bf16, stream);

  AttentionArgs args;
  args.q = bhsd_view(q.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
  args.k = bhsd_view(k.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
  args.v = bhsd_view(v.ptr, pt.dtype, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim, Device::cuda);
  args.o = bhsd_view(o.ptr, pt.dtype, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim, Device::cuda);
  args.lse = lse_view(static_cast<float*>(lse.ptr), pt.batch, pt.heads_q, pt.seq_q, Device::cuda);
  args.causal = pt.causal;
  args.policy = pt.policy;
  args.stream = stream;
  const AttentionPlan plan(args);
  DeviceMemory workspace(plan.workspace_bytes());
  const auto drain = [&] { cuda::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); };
  HostOverhead h;
  h.eager_us = host_us_per_call(calls, [&] { attention(args); }, drain);
  h.run_us = host_us_per_call(calls, [&] { plan.run(args, workspace.ptr); }, drain);
  return h;
}

}  // namespace pasa
