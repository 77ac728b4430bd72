// SPDX-License-Identifier: Apache-2.0
// pasa::attention_with_kvcache on the GPU: the append kernel, then the split-KV decode kernel reading
// the cache in place. The decode plan is made for the cache's capacity (every sequence as long as the
// cache lets it be), so it depends on no index value: the kernels read each sequence's length and
// block ids on the device, and a captured graph replays with new ones.
#include <cuda_runtime.h>

#include <string>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/device_pool.h"
#include "cuda/host/kvcache_append.h"
#include "cuda/host/operand_checks.h"
#include "cuda/host/plan_on_cache.h"
#include "pasa/error.h"
#include "text/format.h"

namespace pasa {

bool cuda_read_to_host(void* dst, const void* src, std::size_t bytes, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cuda::check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  if (status != cudaStreamCaptureStatusNone) return false;
  cuda::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync (the KV cache's index arrays)");
  cuda::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (the KV cache's index arrays)");
  return true;
}

void cuda_attention_with_kvcache(const AttentionArgs& args, const CudaKvCache& c) {
  const bool paged = c.block_table != nullptr;
  const std::int64_t block_size = c.k_cache.shape[2];
  if (paged && (block_size & (block_size - 1)) != 0) {
    throw Error(text::format("k_cache: block size {}; the GPU kernels take a power of two (16, 32, 64, ...)",
                             block_size));
  }
  if (c.k_cache.stride != c.v_cache.stride) {
    throw Error("v_cache: strides differ from k_cache's (the GPU kernels address both with one offset)");
  }
  const std::int64_t batch = args.q.shape[0];
  const std::int64_t capacity = paged ? c.max_blocks * c.k_cache.shape[2] : c.k_cache.shape[2];
  // The decode plan's K and V: `capacity` keys per sequence over the cache's memory (a paged cache's
  // batch stride steps a block, which the kernel follows through the block table).
  AttentionArgs dense = args;
  dense.k = c.k_cache;
  dense.v = c.v_cache;
  dense.k.shape[0] = dense.v.shape[0] = batch;
  dense.k.shape[2] = dense.v.shape[2] = capacity;
  const ProblemShape shape = check_attention_args(dense);
  const auto plan = plan_cuda_attention(dense, shape);
  if (!cuda_plan_is_decode(*plan)) {
    throw Error(text::format("attention_with_kvcache on the GPU runs the split-KV decode kernel, which takes "
                             "S_q <= {} and the exact and fdpp policies; this call (S_q = {}, policy '{}') "
                             "would need {}", cuda::kDecodeMaxSeqQ, shape.seq_q, to_string(args.policy),
                             cuda_plan_choice(*plan).kernel));
  }
  const int device = cuda_plan_device(*plan);
  for (const auto& [t, name] : {std::pair{&args.q, "q"}, {&args.o, "o"}, {&c.k_cache, "k_cache"},
                                {&c.v_cache, "v_cache"}}) {
    check_device_pointer(t->data, name, device);
  }
  if (args.lse.data != nullptr) check_device_pointer(args.lse.data, "lse", device);
  check_device_pointer(c.seqlens, "cache_seqlens", device);
  if (paged) check_device_pointer(c.block_table, "block_table", device);
  const bool append = c.k_new.data != nullptr;
  if (append) {
    for (const auto& [t, name] : {std::pair{&c.k_new, "k"}, {&c.v_new, "v"}}) {
      check_device_pointer(t->data, name, device);
      check_layout(*t, name);
      check_aligned(t->data, name);
    }
  }

  cuda::KvCacheRead read;
  read.seqlens = c.seqlens;
  read.appended = append ? static_cast<int>(c.k_new.shape[2]) : 0;
  read.bottom_right = args.alignment == CausalAlignment::bottom_right;
  if (paged) {
    read.block_table = c.block_table;
    read.max_blocks = static_cast<int>(c.max_blocks);
    while ((std::int64_t{1} << read.block_shift) < block_size) ++read.block_shift;
    read.num_blocks = static_cast<int>(c.k_cache.shape[0]);
  }
  if (append) {
    const auto cache_operand = [](const TensorView& t) {
      return cuda::CacheOperand{t.data, t.stride[0], t.stride[1], t.stride[2]};
    };
    cuda::KvAppendParams p{};
    p.k_new = {c.k_new.data, c.k_new.stride[0], c.k_new.stride[1], c.k_new.stride[2]};
    p.v_new = {c.v_new.data, c.v_new.stride[0], c.v_new.stride[1], c.v_new.stride[2]};
    p.k_cache = cache_operand(c.k_cache);
    p.v_cache = cache_operand(c.v_cache);
    p.cache = read;
    p.capacity = static_cast<int>(capacity);
    p.batch = static_cast<int>(batch);
    p.heads_kv = static_cast<int>(shape.heads_kv);
    p.s_new = read.appended;
    p.head_dim = static_cast<int>(shape.dim);
    p.elem_bytes = static_cast<int>(dtype_size(c.k_cache.dtype));
    cuda::launch_kvcache_append(p, args.stream);
  }
  cuda::StreamBuffer workspace(cuda_plan_workspace_bytes(*plan), device, static_cast<cudaStream_t>(args.stream));
  run_cuda_decode_plan(*plan, dense, workspace.get(), read);
}

}  // namespace pasa
