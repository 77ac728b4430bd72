// SPDX-License-Identifier: Apache-2.0
// bench_host_overhead on the GPU: the host's time per queued call, eager and through a plan.
#include <cuda_runtime.h>

#include "cuda/arch/cuda_check.h"
#include "cuda/bench/bench_problem.h"
#include "cuda/bench/empty_launch.h"
#include "cuda_backend.h"
#include "host_timing.h"
#include "pasa/attention_plan.h"

namespace pasa {

HostOverhead bench_host_overhead_gpu(const BenchPoint& pt, int calls) {
  if (!cuda_backend_available()) {
    throw Error("the GPU host-overhead benchmark needs a GPU of compute capability 8.0 or newer");
  }
  if (pt.dtype == DType::f32) throw Error("dtype: the kernels take fp16 or bf16");
  const BenchProblem problem(pt, 1);
  const AttentionArgs& args = problem.args();
  const AttentionPlan plan(args);
  DeviceMemory workspace(plan.workspace_bytes());
  const auto drain = [&] {
    cuda::check_cuda(cudaStreamSynchronize(problem.stream()), "cudaStreamSynchronize");
  };
  HostOverhead h;
  h.eager_us = host_us_per_call(calls, [&] { attention(args); }, drain);
  h.run_us = host_us_per_call(calls, [&] { plan.run(args, workspace.ptr); }, drain);
  const cudaStream_t stream = problem.stream();
  h.launch_us = host_us_per_call(calls, [&] { cuda::launch_empty_kernel(false, stream); }, drain);
  int device = 0, major = 0;
  cuda::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cuda::check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  if (major == 9) {  // (where the attention kernels launch as programmatic dependents: sm_90)
    h.dependent_launch_us = host_us_per_call(calls, [&] { cuda::launch_empty_kernel(true, stream); }, drain);
  }
  return h;
}

}  // namespace pasa
