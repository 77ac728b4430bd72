// SPDX-License-Identifier: Apache-2.0
// PASA's prepass as a kernel of its own, before the attention kernel: the portable path's, and the
// sm_90a path's where its kernel does not run the same per-chunk work itself (attention_fwd_pasa.cu);
// one warp per 64-channel chunk of a key block (pasa_prepass.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/arch/cuda_check.h"
#include "cuda/block/pasa_prepass.cuh"
#include "cuda/kernels/launch_dispatch.h"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

constexpr int kPrepWarps = 2;  // chunks a CTA (each warp stages 16 KB of rows)

template <int D, typename InElem>
__global__ void __launch_bounds__(32 * kPrepWarps) pasa_prepare_kernel(const __grid_constant__ PasaPrepass p) {
  __shared__ alignas(128) std::uint8_t staging[kPrepWarps][kPasaChunkStagingBytes];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int chunk = static_cast<int>(blockIdx.x) * kPrepWarps + warp;
  if (chunk < p.stages * PasaStage<D>::kKAtoms) {
    prepare_pasa_chunk<D, InElem>(p, p.stage_of(chunk / PasaStage<D>::kKAtoms), chunk % PasaStage<D>::kKAtoms,
                                  static_cast<int>(threadIdx.x) % 32, staging[warp]);
  }
}

template <int D, typename InElem>
void launch_prepare(const PasaPrepass& p, cudaStream_t stream) {
  const long long chunks = static_cast<long long>(p.stages) * PasaStage<D>::kKAtoms;
  if (chunks == 0) return;
  pasa_prepare_kernel<D, InElem><<<static_cast<unsigned>((chunks + kPrepWarps - 1) / kPrepWarps), 32 * kPrepWarps, 0, stream>>>(p);
  check_launch("pasa_prepare_kernel launch");
}

}  // namespace

namespace {

std::size_t pasa_stage_bytes(int head_dim) {
  std::size_t stage = 0;
  dispatch_head_dim<64, 96, 128, 256>(head_dim, "pasa prepass", [&]<int D>() { stage = PasaStage<D>::kBytes; });
  return stage;
}

}  // namespace

std::size_t pasa_tile_bytes(int batch, int heads_kv, int n_kb, int head_dim) {
  const std::size_t stages = static_cast<std::size_t>(batch) * heads_kv * n_kb;
  // (whole KiB, so that what follows, bf16 V's fp16 copy, starts as aligned as the stages)
  return (stages * (pasa_stage_bytes(head_dim) + kPasaVMaxSlots * sizeof(float)) + 1023) / 1024 * 1024;
}

PasaHopperScratch pasa_hopper_scratch(const KernelRequest& c, int n_kb, bool prepass_in_kernel) {
  const std::size_t heads = static_cast<std::size_t>(c.batch) * c.heads_kv;
  const std::size_t v_bytes = c.in_type == ElemType::bf16 ? heads * c.fwd.seq_kv * c.head_dim * 2 : 0;
  const std::size_t sync_bytes = prepass_in_kernel ? (heads * n_kb + 1) * sizeof(std::uint32_t) : 0;
  return {pasa_tile_bytes(c.batch, c.heads_kv, n_kb, c.head_dim), v_bytes, sync_bytes};
}

std::size_t pasa_scratch_bytes(const KernelRequest& c, bool hopper) {
  const int n_kb = (c.fwd.seq_kv + kPasaBlockKv - 1) / kPasaBlockKv;
  return hopper ? pasa_hopper_scratch(c, n_kb, true).total() : pasa_tile_bytes(c.batch, c.heads_kv, n_kb, c.head_dim);
}

void check_pasa_prepass(const KernelRequest& c, int n_kb) {
  if (c.in_type != ElemType::f16 && c.in_type != ElemType::bf16) throw Error("pasa prepass: k/v must be f16 or bf16");
  const long long stages = static_cast<long long>(c.batch) * c.heads_kv * n_kb;
  if (stages * PasaStage<256>::kKAtoms > (1LL << 31) - 1) throw Error("pasa prepass: more than 2^29 key blocks");
}

PasaPrepass pasa_prepass(const PasaRequest& r, std::uint8_t* tiles, void* v_fp16, int n_kb) {
  const KernelRequest& c = r.call;
  const long long stages = static_cast<long long>(c.batch) * c.heads_kv * n_kb;
  // (the stages start on the pool's alignment and are whole KiB, so the slots are 16-byte aligned)
  float* v_max = reinterpret_cast<float*>(tiles + stages * pasa_stage_bytes(c.head_dim));
  return {c.fwd.k, c.fwd.v, c.heads_kv, c.fwd.seq_kv, n_kb, static_cast<int>(stages), r.diag, r.off, r.mean_key_factor,
          tiles,   v_max,   static_cast<__half*>(v_fp16), nullptr, nullptr};
}

void launch_pasa_tiles(const PasaPrepass& p, const KernelRequest& c, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  dispatch_16bit(c.in_type, "pasa prepass", [&]<typename InElem>() {
    dispatch_head_dim<64, 96, 128, 256>(c.head_dim, "pasa prepass", [&]<int D>() { launch_prepare<D, InElem>(p, s); });
  });
}

}  // namespace pasa::cuda
