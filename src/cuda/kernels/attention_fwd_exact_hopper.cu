// SPDX-License-Identifier: Apache-2.0
// The exact policy on the Hopper engine (attention_fwd_hopper.cuh): FlashAttention-2's online softmax
// in fp32 (ExactSoftmax, algorithms.md section 1), P rounded to the input dtype for P V. fp16 / bf16
// inputs, head dims 64 and 128, any output dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <mutex>

#include "cuda/arch/cuda_check.h"
#include "cuda/block/online_softmax.cuh"
#include "cuda/host/kernel_params.h"
#include "cuda/host/tma.h"
#include "cuda/kernels/attention_fwd_hopper.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

constexpr int kMaxDevices = 64;  // as the dispatch's per-device cache

template <typename E>
struct ExactVariant {
  using Elem = E;
  using Softmax = ExactSoftmax<1>;
};

// Sets the kernel's shared-memory attribute once per device: `once` belongs to one kernel (a
// per-call cudaFuncSetAttribute is a driver call on the host path of every launch).
template <class Kernel>
void allow_shared_memory(Kernel* kernel, int bytes, int device, std::once_flag (&once)[kMaxDevices]) {
  std::call_once(once[device], [&] {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
               "cudaFuncSetAttribute(attention_fwd_hopper_kernel, max dynamic shared memory)");
  });
}

template <typename Elem, int D>
void launch_typed(const KernelRequest& r, cudaStream_t stream) {
  using Tile = HopperTile<D>;
  const FwdParams& p = r.fwd;
  const int m_blocks = (p.seq_q + Tile::kBlockM - 1) / Tile::kBlockM;
  // Causal sections: as many (batch, head) pairs as have their K and V in half the L2.
  const long long kv_bytes = 4LL * p.seq_kv * D;
  const int section_heads = static_cast<int>(std::clamp<long long>(r.l2_bytes / 2 / std::max(kv_bytes, 1LL), 1, 1 << 20));
  HopperParams m{fp16_row_tile_map(p.q, r.batch, p.heads_q, p.seq_q, D, Tile::kBlockM, "q"),
                 fp16_row_tile_map(p.k, r.batch, r.heads_kv, p.seq_kv, D, Tile::kBlockN, "k"),
                 fp16_row_tile_map(p.v, r.batch, r.heads_kv, p.seq_kv, D, Tile::kBlockN, "v"),
                 p,
                 {m_blocks, p.heads_q, r.batch, p.causal, section_heads}};
  auto* kernel = attention_fwd_hopper_kernel<ExactVariant<Elem>, D>;
  static std::once_flag smem_set[kMaxDevices];
  allow_shared_memory(kernel, Tile::kSmemBytes, r.device, smem_set);
  const long long tiles = static_cast<long long>(m_blocks) * p.heads_q * r.batch;
  const int grid = static_cast<int>(std::min<long long>(tiles, r.sm_count));
  if (grid == 0) return;
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(m);
  check_launch("attention_fwd_hopper_kernel (exact)");
}

template <typename Elem>
void launch_dim(const KernelRequest& r, cudaStream_t stream) {
  if (r.head_dim == 64) {
    launch_typed<Elem, 64>(r, stream);
  } else if (r.head_dim == 128) {
    launch_typed<Elem, 128>(r, stream);
  } else {
    throw Error("exact Hopper kernel: head dim must be 64 or 128");
  }
}

}  // namespace

void launch_exact_hopper_fwd(const KernelRequest& r, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (r.fwd.negate_q) throw Error("exact Hopper kernel: a negative softmax scale runs on the portable kernel");
  if (r.in_type == ElemType::f16) {
    launch_dim<__half>(r, s);
  } else if (r.in_type == ElemType::bf16) {
    launch_dim<__nv_bfloat16>(r, s);
  } else {
    throw Error("exact Hopper kernel: inputs must be f16 or bf16");
  }
}

}  // namespace pasa::cuda
