// SPDX-License-Identifier: Apache-2.0
// The sage8 and sage_fp8 policies' launch on the Hopper engine (hopper_sage8_mainloop.cuh): the
// quantization prepass (sage8_prepare.cu: smooth K and K8, V8^T as stages, the scales) into scratch
// from pasa's stream-ordered pool, then the kernel, both on the caller's stream.
#include <type_traits>

#include "cuda/block/sage8_qk_codes.cuh"
#include "cuda/block/sage8_stage.cuh"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/tma.h"
#include "cuda/kernels/hopper_sage8_mainloop.cuh"
#include "cuda/kernels/launch_dispatch.h"

namespace pasa::cuda {
namespace {

template <class Codes, typename Elem, int D>
void launch_typed(const Sage8Request& r, cudaStream_t stream) {
  using Variant = Sage8HopperVariant<Elem, Codes>;
  using Tile = typename Variant::template Tile<D>;
  const FwdParams& p = r.fwd;
  // (the map first: what the driver refuses is an error before anything is launched)
  const CUtensorMap q_map = fp16_row_tile_map(p.q, r.batch, p.heads_q, p.seq_q, D, Tile::kBlockM, "q");
  StreamBuffer scratch(sage8_scratch_bytes(r), r.device, stream);
  const Sage8Scratch s = launch_sage8_prepass(r, scratch.get(), stream);
  HopperParams m{q_map, CUtensorMap{}, CUtensorMap{}, p, hopper_schedule<Tile>(r), s.tiles, r.heads_kv};
  m.quant = QuantScales{s.k_scale, s.k_mean, s.v_scale, static_cast<float>(r.alpha)};
  launch_hopper<Variant, D>(m, r, stream,
                            std::is_same_v<Codes, E4m3QkCodes> ? "attention_fwd_hopper_kernel (sage_fp8)"
                                                               : "attention_fwd_hopper_kernel (sage8)");
}

}  // namespace

void launch_sage8(const Sage8Request& r, void* stream) {
  dispatch_qk_codes(r.qk_codes, [&]<class Codes>() {
    dispatch_16bit(r.in_type, "sage8 kernel", [&]<typename Elem>() {
      dispatch_head_dim<64, 128>(r.head_dim, "sage8 kernel", [&]<int D>() {
        launch_typed<Codes, Elem, D>(r, static_cast<cudaStream_t>(stream));
      });
    });
  });
}

}  // namespace pasa::cuda
