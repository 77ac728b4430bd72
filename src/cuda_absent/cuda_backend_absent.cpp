// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of a build without CUDA: every request is a clear error.
#include "cuda_backend.h"
#include "pasa/error.h"

namespace pasa {

bool cuda_backend_available() { return false; }
bool cuda_hopper_path_available() { return false; }
bool cuda_runs_score_mods(const Policy&, DType) { return false; }

namespace {

[[noreturn]] void no_cuda() {
  throw Error("this build of pasa has no CUDA backend: it was built without nvcc on the PATH, or with "
              "PASA_ENABLE_CUDA=OFF (build it again with nvcc on the PATH and PASA_ENABLE_CUDA unset or ON, "
              "pip installs from source included); use host tensors for the CPU backends");
}

}  // namespace

struct CudaPlan {};
struct CudaKvPlan {};

void cuda_attention(const AttentionArgs&, const ProblemShape&) { no_cuda(); }
std::shared_ptr<const CudaPlan> plan_cuda_attention(const AttentionArgs&, const ProblemShape&) { no_cuda(); }
std::size_t cuda_plan_workspace_bytes(const CudaPlan&) { no_cuda(); }
void run_cuda_plan(const CudaPlan&, const AttentionArgs&, void*) { no_cuda(); }
void run_cuda_plan_pooled(const CudaPlan&, const AttentionArgs&) { no_cuda(); }
void cuda_reserve_scratch(const std::vector<std::shared_ptr<const CudaPlan>>&, void*) { no_cuda(); }
CudaPlanChoice cuda_plan_choice(const CudaPlan&) { no_cuda(); }
void cuda_attention_with_kvcache(const AttentionArgs&, const CudaKvCache&) { no_cuda(); }
std::shared_ptr<const CudaKvPlan> plan_cuda_kvcache(const AttentionArgs&, const CudaKvCache&) { no_cuda(); }
std::size_t cuda_kvcache_workspace_bytes(const CudaKvPlan&) { no_cuda(); }
void run_cuda_kvcache(const CudaKvPlan&, const AttentionArgs&, const CudaKvCache&, void*) { no_cuda(); }
bool cuda_read_to_host(void*, const void*, std::size_t, void*, const char*) { no_cuda(); }
void cuda_check_empty_rows(const TensorView&, const LseView&) { no_cuda(); }
void cuda_write_empty_rows(const TensorView&, const LseView&, void*) { no_cuda(); }
void cuda_check_device_memory(const void*, const char*) { no_cuda(); }
void cuda_check_aligned_operands(const AttentionArgs&) { no_cuda(); }

}  // namespace pasa
