// SPDX-License-Identifier: Apache-2.0
// pasa::attention_with_kvcache on the GPU: the append kernel, then the split-KV decode kernel reading
// the cache in place. The decode plan is made for the cache's capacity (every sequence as long as the
// cache lets it be), so it depends on no index value: the kernels read each sequence's length and
// block ids on the device, and a captured graph replays with new ones.
#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <utility>
#include <string>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/kvcache_append.h"
#include "cuda/host/operand_checks.h"
#include "cuda/host/plan_on_cache.h"
#include "cuda_backend.h"
#include "pasa/error.h"
#include "text/format.h"

namespace pasa {

bool cuda_read_to_host(void* dst, const void* src, std::size_t bytes, void* stream_ptr, const char* name) {
  cuda_check_device_memory(src, name);  // (a host array would be a copy of the wrong kind)
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cuda::check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  if (status != cudaStreamCaptureStatusNone) return false;
  // (the message made on failure only: an eager decode step reads its index arrays every call)
  const auto check = [&](cudaError_t result, const char* call) {
    if (result != cudaSuccess) cuda::check_cuda(result, text::format("{} ({} to the host)", call, name).c_str());
  };
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return true;
}

struct CudaKvPlan {
  std::shared_ptr<const CudaPlan> decode;  // the decode kernel's plan for `capacity` keys a sequence
  std::int64_t capacity;
  cuda::KvCacheRead layout;  // the cache's geometry (the index arrays' pointers are set per run)
  int device;
};

namespace {

// The tensors of a call, named as errors name them (k and v: null data when nothing is appended).
std::array<std::pair<const TensorView*, const char*>, 6> named_tensors(const AttentionArgs& args,
                                                                         const CudaKvCache& c) {
  return {{{&args.q, "q"}, {&args.o, "o"}, {&c.k_cache, "k_cache"}, {&c.v_cache, "v_cache"}, {&c.k_new, "k"},
           {&c.v_new, "v"}}};
}

// The cache with each view's strides canonical (attention_checks.h), before over_capacity widens the
// batch and sequence dimensions that a cache of one sequence or one-position blocks has as size 1.
CudaKvCache with_canonical_strides(CudaKvCache c) {
  for (TensorView* t : {&c.k_cache, &c.v_cache, &c.k_new, &c.v_new}) t->stride = canonical_strides(*t);
  return c;
}

// The decode plan's K and V: `capacity` keys per sequence over the cache's memory (a paged cache's
// batch stride steps a block, which the kernel follows through the block table).
AttentionArgs over_capacity(const AttentionArgs& args, const CudaKvCache& c, std::int64_t capacity) {
  AttentionArgs dense = args;
  dense.k = c.k_cache;
  dense.v = c.v_cache;
  dense.k.shape[0] = dense.v.shape[0] = args.q.shape[0];
  dense.k.shape[2] = dense.v.shape[2] = capacity;
  return dense;
}

}  // namespace

std::shared_ptr<const CudaKvPlan> plan_cuda_kvcache(const AttentionArgs& args, const CudaKvCache& cache) {
  const CudaKvCache c = with_canonical_strides(cache);
  const bool paged = c.block_table != nullptr;
  const std::int64_t block_size = c.k_cache.shape[2];
  if (paged && (block_size & (block_size - 1)) != 0) {
    throw Error(text::format("k_cache: block size {}; the GPU kernels take a power of two (16, 32, 64, ...)",
                             block_size));
  }
  if (c.k_cache.stride != c.v_cache.stride) {
    throw Error("v_cache: strides differ from k_cache's (the GPU kernels address both with one offset)");
  }
  auto plan = std::make_shared<CudaKvPlan>();
  plan->capacity = paged ? c.max_blocks * block_size : block_size;
  if (paged && plan->capacity > cuda::kMaxSeq) {
    throw Error(text::format("block_table: {} blocks of {} positions a sequence ({}); the GPU kernels take up to "
                             "2^30 positions", c.max_blocks, block_size, plan->capacity));
  }
  const AttentionArgs dense = over_capacity(args, c, plan->capacity);
  // The caller checked the caches' real memory: these views span a capacity, not an allocation.
  const ProblemShape shape = check_attention_problem(dense);
  plan->decode = plan_cuda_decode(dense, shape);
  plan->device = cuda_plan_device(*plan->decode);
  for (const auto& [t, name] : {std::pair{&c.k_new, "k"}, {&c.v_new, "v"}}) {
    if (t->data != nullptr) check_layout(*t, name);
  }
  cuda::KvCacheRead& layout = plan->layout;
  layout.appended = c.k_new.data != nullptr ? static_cast<int>(c.k_new.shape[2]) : 0;
  layout.bottom_right = args.alignment == CausalAlignment::bottom_right;
  if (paged) {
    layout.max_blocks = static_cast<int>(c.max_blocks);
    layout.num_blocks = static_cast<int>(c.k_cache.shape[0]);
    while ((std::int64_t{1} << layout.block_shift) < block_size) ++layout.block_shift;
  }
  return plan;
}

std::size_t cuda_kvcache_workspace_bytes(const CudaKvPlan& plan) { return cuda_plan_workspace_bytes(*plan.decode); }

void run_cuda_kvcache(const CudaKvPlan& plan, const AttentionArgs& args, const CudaKvCache& cache, void* workspace) {
  const CudaKvCache c = with_canonical_strides(cache);
  if (c.seqlens == nullptr) throw Error("cache_seqlens: pointer is null");
  if ((plan.layout.max_blocks > 0) != (c.block_table != nullptr)) {
    throw Error("block_table: null in a paged plan, or set in a dense one");
  }
  // Every pointer's alignment before the append writes the cache (the decode launch checks again).
  for (const auto& [t, name] : named_tensors(args, c)) {
    if (t->data != nullptr) check_aligned(t->data, name);
  }
  check_lse_aligned(args.lse.data);
  check_cuda_plan_launchable(*plan.decode, args);
  cuda::KvCacheRead read = plan.layout;
  read.seqlens = c.seqlens;
  read.block_table = c.block_table;
  if (read.appended > 0) {
    const auto cache_operand = [](const TensorView& t) {
      return cuda::CacheOperand{t.data, t.stride[0], t.stride[1], t.stride[2]};
    };
    cuda::KvAppendParams p{};
    p.k_new = {c.k_new.data, c.k_new.stride[0], c.k_new.stride[1], c.k_new.stride[2]};
    p.v_new = {c.v_new.data, c.v_new.stride[0], c.v_new.stride[1], c.v_new.stride[2]};
    p.k_cache = cache_operand(c.k_cache);
    p.v_cache = cache_operand(c.v_cache);
    p.cache = read;
    p.capacity = static_cast<int>(plan.capacity);
    p.batch = static_cast<int>(args.q.shape[0]);
    p.heads_kv = static_cast<int>(c.k_cache.shape[1]);
    p.s_new = read.appended;
    p.head_dim = static_cast<int>(c.k_cache.shape[3]);
    p.elem_bytes = static_cast<int>(dtype_size(c.k_cache.dtype));
    cuda::launch_kvcache_append(p, args.stream);
  }
  run_cuda_decode_plan(*plan.decode, over_capacity(args, c, plan.capacity), workspace, read);
}

void cuda_attention_with_kvcache(const AttentionArgs& args, const CudaKvCache& c) {
  const auto plan = plan_cuda_kvcache(args, c);
  for (const auto& [t, name] : named_tensors(args, c)) {
    if (t->data != nullptr) check_device_pointer(t->data, name, plan->device);
  }
  if (args.lse.data != nullptr) check_device_pointer(args.lse.data, "lse", plan->device);
  // (cache_seqlens and block_table were checked where the caller read them: cuda_read_to_host)
  check_cuda_plan_launchable(*plan->decode, args);  // (before the pool's allocation, a node of a capture)
  cuda::StreamBuffer workspace(cuda_kvcache_workspace_bytes(*plan), plan->device,
                               static_cast<cudaStream_t>(args.stream));
  run_cuda_kvcache(*plan, args, c, workspace.get());
}

}  // namespace pasa
