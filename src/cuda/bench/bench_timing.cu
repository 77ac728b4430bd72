// SPDX-License-Identifier: Apache-2.0
// pasa::bench_cuda_attention: CUDA-event timing of the public attention call on device tensors, or of
// a KVCachePlan's run on a device KV cache (include/pasa/bench.h). The scratch for inputs, outputs and
// the L2 flush comes from cudaMalloc once per call of this function and is freed before it returns.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/arch/cuda_check.h"
#include "cuda/bench/bench_problem.h"
#include "cuda_backend.h"
#include "pasa/attention.h"
#include "pasa/bench.h"
#include "pasa/error.h"
#include "pasa/serving.h"

namespace pasa {
namespace {

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    cuda::check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    cuda::check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

void require_gpu() {
  if (!cuda_backend_available()) {
    throw Error("timing the kernels needs a GPU of compute capability 8.0 or newer; none was found");
  }
}

// `call` (which enqueues on `stream`) made `warmup` times, then timed `runs` times with CUDA events,
// each after a write of twice the L2 size (outside the timed interval).
template <class Call>
BenchTiming time_calls(Call call, cudaStream_t stream, int warmup, int runs) {
  int device = 0, l2_bytes = 0;
  cuda::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cuda::check_cuda(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute");
  const std::size_t flush_bytes = 2 * static_cast<std::size_t>(std::max(l2_bytes, 1 << 20));
  DeviceMemory flush(flush_bytes);
  Events ev;

  for (int i = 0; i < warmup; ++i) call();
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    cuda::check_cuda(cudaMemsetAsync(flush.ptr, i & 0xff, flush_bytes, stream), "cudaMemsetAsync (L2 flush)");
    cuda::check_cuda(cudaEventRecord(ev.start, stream), "cudaEventRecord");
    call();
    cuda::check_cuda(cudaEventRecord(ev.stop, stream), "cudaEventRecord");
    cuda::check_cuda(cudaEventSynchronize(ev.stop), "cudaEventSynchronize");
    float ms = 0;
    cuda::check_cuda(cudaEventElapsedTime(&ms, ev.start, ev.stop), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  BenchTiming t;
  t.runs = runs;
  t.median_ms = runs % 2 ? times[runs / 2] : 0.5 * (times[runs / 2 - 1] + times[runs / 2]);
  t.min_ms = times.front();
  t.max_ms = times.back();
  return t;
}

}  // namespace

std::string bench_device_description() {
  require_gpu();
  int device = 0, driver = 0, runtime = 0;
  cuda::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  cuda::check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  cuda::check_cuda(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  cuda::check_cuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(prop.multiProcessorCount) + " SMs), CUDA driver " + std::to_string(driver / 1000) + "." +
         std::to_string(driver % 1000 / 10) + ", runtime " + std::to_string(runtime / 1000) + "." +
         std::to_string(runtime % 1000 / 10);
}

BenchTiming bench_cuda_attention(const BenchPoint& pt, int warmup, int runs, std::uint64_t seed) {
  require_gpu();
  if (pt.dtype == DType::f32) throw Error("pasa bench: inputs must be fp16 or bf16 (the kernels' types)");
  if (runs < 1 || warmup < 0) throw Error("pasa bench: runs must be >= 1 and warmup >= 0");
  if (pt.kv_cache_block == BenchPoint::kTensors) {
    const BenchProblem problem(pt, seed);
    return time_calls([&] { attention(problem.args()); }, problem.stream(), warmup, runs);
  }
  const BenchKVCache cache(pt, seed);
  const KVCachePlan plan(cache.args());
  DeviceMemory workspace(plan.workspace_bytes());
  return time_calls([&] { plan.run(cache.args(), workspace.ptr); }, cache.stream(), warmup, runs);
}

}  // namespace pasa
