// SPDX-License-Identifier: Apache-2.0
// The pasa and pasa_accurate policies' launch on the Hopper engine (hopper_pasa_mainloop.cuh): the
// prepass (pasa_prepare.cu: K' = M K in fp16 as the kernel's K slots; for bf16 inputs V rounded to
// fp16) into scratch from pasa's stream-ordered pool, then the kernel, both on the caller's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/block/pasa_stage.cuh"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/tma.h"
#include "cuda/kernels/hopper_pasa_mainloop.cuh"
#include "cuda/kernels/launch_dispatch.h"

namespace pasa::cuda {
namespace {

template <typename QElem, int D, bool kAccurate>
void launch_typed(const PasaRequest& r, cudaStream_t stream) {
  using Variant = PasaHopperVariant<QElem, kAccurate>;
  using Tile = typename Variant::template Tile<D>;
  const KernelRequest& c = r.call;
  const FwdParams& p = c.fwd;
  const int n_kb = (p.seq_kv + Tile::kBlockN - 1) / Tile::kBlockN;
  const std::size_t tile_bytes = pasa_tile_bytes(c.batch, c.heads_kv, n_kb, D);
  const bool bf16 = std::is_same_v<QElem, __nv_bfloat16>;  // V needs rounding to fp16 first
  const std::size_t v_bytes = bf16 ? static_cast<std::size_t>(c.batch) * c.heads_kv * p.seq_kv * D * 2 : 0;
  StreamBuffer scratch(tile_bytes + v_bytes, c.device, stream);
  auto* tiles = static_cast<std::uint8_t*>(scratch.get());
  void* v_fp16 = bf16 ? tiles + tile_bytes : nullptr;
  const std::int64_t sh = static_cast<std::int64_t>(p.seq_kv) * D;
  const Operand v = bf16 ? Operand{v_fp16, c.heads_kv * sh, sh, D} : p.v;
  // (the maps first: what the driver refuses is an error before anything is launched)
  const HopperParams m{fp16_row_tile_map(p.q, c.batch, p.heads_q, p.seq_q, D, Tile::kBlockM, "q"),
                       CUtensorMap{},  // K' comes by bulk copies of the prepass's tiles
                       fp16_row_tile_map(v, c.batch, c.heads_kv, p.seq_kv, D, Tile::kBlockN, "v"),
                       p,
                       hopper_schedule<Tile>(c),
                       tiles,
                       c.heads_kv};
  launch_pasa_tiles(r, tiles, v_fp16, n_kb, stream);
  launch_hopper<Variant, D>(m, c, stream, "attention_fwd_hopper_kernel (pasa)");
}

}  // namespace

void launch_pasa(const PasaRequest& r, void* stream) {
  dispatch_pasa<64, 128>(r, "pasa kernel", [&]<typename QElem, int D, bool kAccurate>() {
    launch_typed<QElem, D, kAccurate>(r, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace pasa::cuda
