// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's entry points as the dispatcher sees them. Implemented by src/cuda/ when the build
// has CUDA, and by src/cuda_absent/ (clear errors) when it does not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention_checks.h"
#include "pasa/attention.h"

namespace pasa {

// Whether this build has CUDA kernels and the current device can run them (compute capability 8.0
// or newer).
bool cuda_backend_available();

// Whether calls on the current device take the sm_90a kernels by default: an sm_90 GPU, a build with
// sm_90a kernels, and PASA_CUDA_PATH not set to portable. The pasa and sage8 policies need it.
bool cuda_hopper_path_available();

// Whether the CUDA kernels run a sliding window, a logit softcap and an attention mask under `policy`
// for inputs of dtype `in`: the exact family's prefill kernels do, the others (pasa, sage8, fdpp)
// take none. False for a policy the kernels do not run, and in a build without CUDA. Reads no device.
bool cuda_runs_score_mods(const Policy& policy, DType in);

// Runs args on the GPU (all tensors on the device, work on args.stream). Throws pasa::Error for
// policies, head dims, dtypes or devices the kernels do not support, before any launch.
void cuda_attention(const AttentionArgs& args, const ProblemShape& shape);

// The host decisions of one problem (src/cuda/host/cuda_attention.cpp). Planning checks what
// cuda_attention checks except the data pointers; running launches only, into a caller-owned device
// workspace of cuda_plan_workspace_bytes (no allocation, no device query, no pointer-kind check).
struct CudaPlan;
std::shared_ptr<const CudaPlan> plan_cuda_attention(const AttentionArgs& args, const ProblemShape& shape);
std::size_t cuda_plan_workspace_bytes(const CudaPlan& plan);
void run_cuda_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace);
// run_cuda_plan with its workspace from pasa's own stream-ordered pool on args.stream (what an eager
// call does after its checks).
void run_cuda_plan_pooled(const CudaPlan& plan, const AttentionArgs& args);
// Takes from pasa's pool, on `stream`, what the largest of `plans` (null ones skipped) needs for one
// run (its workspace and its kernels' scratch), and hands it back to the pool, which keeps it: runs of
// the plans after it on `stream` then find their memory, so that a shortage is a ResourceError here,
// before the first of several launches writes.
void cuda_reserve_scratch(const std::vector<std::shared_ptr<const CudaPlan>>& plans, void* stream);

// A KV cache as the GPU decode kernel reads it (pasa/serving.h; every pointer device memory).
struct CudaKvCache {
  TensorView k_cache, v_cache;      // paged [num_blocks, H_kv, block_size, D]; dense [B, H_kv, S_max, D]
  TensorView k_new, v_new;          // [B, H_kv, S_new, D], written into the cache first; data null: none
  const std::int32_t* seqlens;      // [B]: positions cached before the append
  const std::int32_t* block_table;  // [B, max_blocks]; null: dense
  std::int64_t max_blocks;
};

// Appends the new keys, then runs args (q, o, lse and the options of pasa::attention_with_kvcache;
// k and v unused) against the cache on args.stream. Throws pasa::Error, before any launch, for what
// the kernels do not support (S_q > 16, a policy other than the decode kernel's, layouts, devices).
// The index arrays' values are the caller's to check (the kernels only stay inside the tensors).
void cuda_attention_with_kvcache(const AttentionArgs& args, const CudaKvCache& cache);

// The same in two steps (KVCachePlan): the plan checks and decides what the call above does, except
// the pointers' memory kind; the run launches only, into a caller-owned device workspace.
struct CudaKvPlan;
std::shared_ptr<const CudaKvPlan> plan_cuda_kvcache(const AttentionArgs& args, const CudaKvCache& cache);
std::size_t cuda_kvcache_workspace_bytes(const CudaKvPlan& plan);
void run_cuda_kvcache(const CudaKvPlan& plan, const AttentionArgs& args, const CudaKvCache& cache, void* workspace);

// Copies `bytes` of device memory at `src` (the array `name`: an error names it, host memory among
// them) to the host at `dst` on `stream` and waits for it; returns false, copying nothing, while the
// stream is being captured into a CUDA graph (which cannot wait).
bool cuda_read_to_host(void* dst, const void* src, std::size_t bytes, void* stream, const char* name);

// O = 0 and LSE = -inf (when lse.data is set) for every row of the batch-of-one views o [1, H, n, D]
// and lse [1, H, n], on `stream`: the result of query rows that see no key. The check throws
// pasa::Error for the layouts the write does not take (rows that are not contiguous, more than 65535
// heads; the memory is the caller's to check); the write launches only.
void cuda_check_empty_rows(const TensorView& o, const LseView& lse);
void cuda_write_empty_rows(const TensorView& o, const LseView& lse, void* stream);

// Throws pasa::Error unless args' q, k, v, o (16 bytes) and lse (4 bytes) are aligned as the kernels
// read and write them: the run of a plan checks it, and a caller that writes before its runs (the
// packed call's rows without keys) checks every run first.
void cuda_check_aligned_operands(const AttentionArgs& args);

// Throws pasa::Error unless `t`'s memory is the current device's (as the dense GPU call checks).
void cuda_check_device_memory(const void* data, const char* name);

// What a plan chose: its path (the sm_90a kernels, or the portable ones: another GPU, or asked for)
// and its kernel's name ("exact (portable)", "decode (split-KV)", ...).
enum class CudaKernelPath { hopper, portable };
struct CudaPlanChoice {
  CudaKernelPath path;
  const char* kernel;
};
CudaPlanChoice cuda_plan_choice(const CudaPlan& plan);

}  // namespace pasa
