// SPDX-License-Identifier: Apache-2.0
// Timing pasa::attention on the GPU: the measurement behind `pasa bench` (docs/performance.md).
#pragma once

#include <cstdint>
#include <string>

#include "pasa/policy.h"
#include "pasa/tensor.h"

namespace pasa {

// One benchmark point: BHSD-contiguous Q [B, Hq, Sq, D], K and V [B, Hkv, Skv, D] of `dtype` on the
// GPU, output of the same dtype, an fp32 LSE.
struct BenchPoint {
  Policy policy;
  DType dtype = DType::f16;
  int batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_kv = 1, head_dim = 128;
  bool causal = false;
  // Where K and V are read from. kTensors: the tensors above, through pasa::attention. Otherwise a KV
  // cache through attention_with_kvcache (a KVCachePlan's run: the launches alone), every sequence
  // full (cache_seqlens = Skv): 0 for a dense cache [B, Skv, Hkv, D], a power of two dividing Skv for
  // a paged one of blocks of that many positions [B Skv / block, block, Hkv, D], its block table a
  // seeded shuffle of the pool.
  static constexpr int kTensors = -1;
  int kv_cache_block = kTensors;
};

struct BenchTiming {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int runs = 0;
};

// Fills the inputs with seeded uniform values in [-1, 1) on the device, makes `warmup` calls, then
// times `runs` calls one by one with CUDA events, each after a write of twice the L2 size that
// evicts the inputs from L2 (outside the timed interval). Everything a call does is timed: for sage8
// its quantization prepass, for pasa its K' prepass (a KV-cache point: the plan's launches). Throws
// pasa::Error without the CUDA backend or a GPU of compute capability 8.0 or newer, or when the kernels
// do not support the point (pasa and sage8 off the sm_90a path).
BenchTiming bench_cuda_attention(const BenchPoint& point, int warmup, int runs, std::uint64_t seed);

// Host time of one call in microseconds: pasa::attention (eager: checks, plan, pointer checks, pool
// workspace, launch) and AttentionPlan::run (launch only, caller workspace), each the median over 15
// rounds of `calls` calls. On the GPU (device cuda) the calls are queued without synchronizing, so
// the wall time is the host's; on the CPU the emulator computes, so pick a tiny point (one query,
// one key) to see the calls' fixed cost. On the GPU also the floor a launch sets: the host time of
// launching an empty kernel the way the attention kernels are launched (cudaLaunchKernelEx), plain
// and (sm_90, where the attention kernels use it; 0 elsewhere) as a programmatic dependent launch.
struct HostOverhead {
  double eager_us = 0, run_us = 0;
  double launch_us = 0, dependent_launch_us = 0;
};
HostOverhead bench_host_overhead(const BenchPoint& point, Device device, int calls);

// "NVIDIA H200, driver 580.xx, CUDA runtime 13.0, 132 SMs": what the numbers were measured on.
std::string bench_device_description();

}  // namespace pasa
