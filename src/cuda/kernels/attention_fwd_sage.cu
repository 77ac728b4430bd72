// SPDX-License-Identifier: Apache-2.0
// The sage8 policy's launch on the Hopper engine (hopper_sage8_mainloop.cuh): the quantization prepass
// (sage8_prepare.cu: smooth K and K8, V8^T as stages, the scales) into scratch from pasa's
// stream-ordered pool, then the kernel, both on the caller's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/block/sage8_stage.cuh"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/tma.h"
#include "cuda/kernels/hopper_sage8_mainloop.cuh"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <typename Elem, int D>
void launch_typed(const Sage8Request& r, cudaStream_t stream) {
  using Variant = Sage8HopperVariant<Elem>;
  using Tile = typename Variant::template Tile<D>;
  const FwdParams& p = r.fwd;
  // (the map first: what the driver refuses is an error before anything is launched)
  const CUtensorMap q_map = fp16_row_tile_map(p.q, r.batch, p.heads_q, p.seq_q, D, Tile::kBlockM, "q");
  StreamBuffer scratch(sage8_scratch_bytes(r), r.device, stream);
  const Sage8Scratch s = launch_sage8_prepass(r, scratch.get(), stream);
  HopperParams m{q_map, CUtensorMap{}, CUtensorMap{}, p, hopper_schedule<Tile>(r), s.tiles, r.heads_kv};
  m.quant = QuantScales{s.k_scale, s.k_mean, s.v_scale, static_cast<float>(r.alpha)};
  launch_hopper<Variant, D>(m, r, stream, "attention_fwd_hopper_kernel (sage8)");
}

template <typename Elem>
void launch_dim(const Sage8Request& r, cudaStream_t stream) {
  if (r.head_dim == 64) {
    launch_typed<Elem, 64>(r, stream);
  } else if (r.head_dim == 128) {
    launch_typed<Elem, 128>(r, stream);
  } else {
    throw Error("sage8 kernel: head dim must be 64 or 128");
  }
}

}  // namespace

void launch_sage8(const Sage8Request& r, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (r.in_type == ElemType::f16) {
    launch_dim<__half>(r, s);
  } else if (r.in_type == ElemType::bf16) {
    launch_dim<__nv_bfloat16>(r, s);
  } else {
    throw Error("sage8 kernel: inputs must be f16 or bf16");
  }
}

}  // namespace pasa::cuda
