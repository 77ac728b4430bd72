// SPDX-License-Identifier: Apache-2.0
// The launch of the pasa policies on the Hopper engine (hopper_pasa_mainloop.cuh), whose producer
// warpgroup also runs the prepass (pasa_prepass.cuh: K' = M K in fp16 as the kernel's K slots; for bf16
// inputs V rounded to fp16) where each stage serves enough tiles: scratch from pasa's stream-ordered
// pool for the stages, fp16 V and the prepass's readiness words and counter (zeroed), then the kernel,
// on the caller's stream; elsewhere the prepass kernel, then the kernel. Instantiated by
// attention_fwd_pasa.cu (pasa, pasa_accurate) and attention_fwd_pasa_fp16acc.cu (pasa_fp16acc), so that
// the two compile apart.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/block/pasa_stage.cuh"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/tma.h"
#include "cuda/kernels/hopper_pasa_mainloop.cuh"

namespace pasa::cuda {
namespace pasa_hopper {

// Where the prepass runs inside the attention kernel: where each stage serves enough tiles (query
// blocks times the GQA group, halved for causal calls). Below that the spare warps' start-up (the first
// tiles wait for their stages) costs more than a kernel of its own. The least reuse that gains was
// measured with both placements at every point of `pasa bench` at S = 512-4096 (bench/NOTES.md,
// fortieth session):
// - pasa and pasa_fp16acc at D 128 keep the kernel of its own longest: the attention kernel with the
//   prepass inside stores O without staging, and fp16's prepass kernel (K alone) is half bf16's
//   (K and V), so it costs least where it runs apart;
// - at D 64 both kernels stage O alike, and the prepass inside gains from 2 tiles a stage on (fp16)
//   and 4 (bf16; 2 lost 10%);
// - pasa_accurate's longer loop (S' and its state in fp32) hides the spare warps' work sooner: 2 at
//   D 64, 4 at D 128.
inline double prepass_min_reuse(const KernelRequest& c, bool accurate) {
  const bool bf16 = c.in_type == ElemType::bf16;
  if (c.head_dim >= 128) return accurate ? 4.0 : (bf16 ? 16.0 : 32.0);
  return accurate || !bf16 ? 2.0 : 4.0;
}

// pasa's and pasa_fp16acc's D 64 kernels on three consumer warpgroups (192-row tiles): measured
// 1.09-1.17x two at 4k and 16k full, 1.01-1.10x causal, 1.00-1.07x at 1k full (pasa_fp16acc; pasa
// 1.01-1.16x, bench/NOTES.md); but 0.89-0.93x at 1k causal, where more of a 192-row tile lies past the
// diagonal. Causal calls up to 2k keep two (2k itself not measured: the crossover lies between 1k and 4k).
inline bool three_consumers64(const FwdParams& p) { return !(p.causal && p.seq_q <= 2048 && p.seq_kv <= 2048); }

inline bool prepass_in_kernel(const KernelRequest& c, int block_m, bool accurate) {
  const FwdParams& p = c.fwd;
  const double m_blocks = (p.seq_q + block_m - 1) / block_m;
  const double reuse = p.group * m_blocks * (p.causal ? 0.5 : 1.0);
  return reuse >= prepass_min_reuse(c, accurate);
}

// The (batch, K/V head) pairs whose tiles run at one time: a causal section (tile_scheduler.cuh), or
// as many heads as the grid's first tiles cover.
inline int prepass_section_pairs(const KernelRequest& c, const TileScheduler& s) {
  const long long heads = s.causal ? s.section_heads : (hopper_grid(s, c) + s.m_blocks - 1) / s.m_blocks;
  return static_cast<int>(std::max<long long>(1, (heads + c.fwd.group - 1) / c.fwd.group));
}

}  // namespace pasa_hopper

// One instantiation's launch: the prepass's scratch and placement, the maps, the kernel.
template <typename QElem, int D, bool kAccurate, bool kFp16Acc, int kConsumers64 = 2>
void launch_pasa_hopper(const PasaRequest& r, cudaStream_t stream) {
  using Variant = PasaHopperVariant<QElem, kAccurate, true, kFp16Acc, kConsumers64>;
  using Tile = typename Variant::template Tile<D>;
  const KernelRequest& c = r.call;
  const FwdParams& p = c.fwd;
  static_assert(Tile::kBlockN == kPasaBlockKv);
  const int n_kb = (p.seq_kv + Tile::kBlockN - 1) / Tile::kBlockN;
  const bool bf16 = std::is_same_v<QElem, __nv_bfloat16>;  // V needs rounding to fp16 first
  const bool in_kernel = pasa_hopper::prepass_in_kernel(c, Tile::kBlockM, kAccurate);
  check_pasa_prepass(c, n_kb);
  const PasaHopperScratch layout = pasa_hopper_scratch(c, n_kb, in_kernel);
  StreamBuffer scratch(layout.total(), c.device, stream);
  auto* tiles = static_cast<std::uint8_t*>(scratch.get());
  void* v_fp16 = bf16 ? tiles + layout.tile_bytes : nullptr;
  PasaPrepass prepass = pasa_prepass(r, tiles, v_fp16, n_kb);
  const TileScheduler schedule = hopper_schedule<Tile>(c);
  if (in_kernel) {
    prepass.ready = reinterpret_cast<std::uint32_t*>(tiles + layout.tile_bytes + layout.v_bytes);
    prepass.tickets = prepass.ready + prepass.stages;
    prepass.section_pairs = pasa_hopper::prepass_section_pairs(c, schedule);
  }
  const std::int64_t sh = static_cast<std::int64_t>(p.seq_kv) * D;
  const Operand v = bf16 ? Operand{v_fp16, c.heads_kv * sh, sh, D} : p.v;
  // (the maps first: what the driver refuses is an error before anything is launched)
  const HopperParams m{fp16_row_tile_map(p.q, c.batch, p.heads_q, p.seq_q, D, Tile::kBlockM, "q"),
                       CUtensorMap{},  // K' comes by bulk copies of the prepass's tiles
                       fp16_row_tile_map(v, c.batch, c.heads_kv, p.seq_kv, D, Tile::kBlockN, "v"),
                       p,
                       schedule,
                       tiles,
                       c.heads_kv,
                       QuantScales{},
                       prepass};
  if (in_kernel) {
    check_cuda(cudaMemsetAsync(prepass.ready, 0, layout.sync_bytes, stream), "cudaMemsetAsync (pasa prepass)");
  } else {
    launch_pasa_tiles(prepass, c, stream);
  }
  if constexpr (D == 128) {
    // (a kernel of its own without the prepass: its idle staging buffers then hold the output stages)
    if (!in_kernel) {
      launch_hopper<PasaHopperVariant<QElem, kAccurate, false, kFp16Acc>, D>(
          m, c, stream, "attention_fwd_hopper_kernel (pasa, staged O)");
      return;
    }
  }
  launch_hopper<Variant, D>(m, c, stream, "attention_fwd_hopper_kernel (pasa)");
}

}  // namespace pasa::cuda
