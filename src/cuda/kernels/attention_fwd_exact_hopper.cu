// SPDX-License-Identifier: Apache-2.0
// The exact policy's launch on the Hopper engine (hopper_exact_mainloop.cuh): fp16 / bf16 inputs,
// head dims 64 and 128, any output dtype, with or without an attention mask, softcap or sliding window.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/host/kernel_params.h"
#include "cuda/host/tma.h"
#include "cuda/kernels/hopper_exact_mainloop.cuh"
#include "cuda/kernels/launch_dispatch.h"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

template <typename Elem, int D, bool kScoreMods, int kConsumers64 = kScoreMods ? 2 : 3>
void launch_typed(const KernelRequest& r, cudaStream_t stream) {
  using Variant = ExactHopperVariant<Elem, kScoreMods, kConsumers64>;
  using Tile = typename Variant::template Tile<D>;
  const FwdParams& p = r.fwd;
  const HopperParams m{fp16_row_tile_map(p.q, r.batch, p.heads_q, p.seq_q, D, Tile::kBlockM, "q"),
                       fp16_row_tile_map(p.k, r.batch, r.heads_kv, p.seq_kv, D, Tile::kBlockN, "k"),
                       fp16_row_tile_map(p.v, r.batch, r.heads_kv, p.seq_kv, D, Tile::kBlockN, "v"),
                       p,
                       hopper_schedule<Tile>(r),
                       nullptr,
                       r.heads_kv};
  launch_hopper<Variant, D>(m, r, stream, "attention_fwd_hopper_kernel (exact)");
}

}  // namespace

void launch_exact_fwd(const KernelRequest& r, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const FwdParams& p = r.fwd;
  if (p.negate_q) throw Error("exact Hopper kernel: a negative softmax scale runs on the portable kernel");
  const bool score_mods = p.mask_type != MaskType::none || p.softcap > 0.0f;
  // At D 64, two consumer warpgroups (128-row tiles) instead of three (192) for
  // - causal calls of up to 4k queries and keys: measured 1.03-1.11x three at 1k and 4k, 0.87-1.00x
  //   at 16k (bench/NOTES.md, S_q = S_kv). (A few queries against many keys, as in chunked prefill,
  //   are mostly unmasked: the full case.)
  // - calls whose last 192-row tile pads the queries by over 5% more than a 128-row one would: S_q =
  //   1k full measured 1.05-1.07x three (12.5% padding against none); 2k and 4k (3% against none)
  //   0.97-1.03x, where three stay.
  const int seq_q = p.seq_q;
  const auto query_padding = [&](int tile_rows) { return (seq_q + tile_rows - 1) / tile_rows * tile_rows - seq_q; };
  const bool two_consumers64 = (p.causal && seq_q <= 4096 && p.seq_kv <= 4096) ||
                               20 * (query_padding(3 * 64) - query_padding(2 * 64)) > seq_q;
  dispatch_16bit(r.in_type, "exact Hopper kernel", [&]<typename Elem>() {
    dispatch_head_dim<64, 128>(r.head_dim, "exact Hopper kernel", [&]<int D>() {
      if (score_mods) {
        launch_typed<Elem, D, true>(r, s);
        return;
      }
      if constexpr (D == 64) {
        if (two_consumers64) {
          launch_typed<Elem, D, false, 2>(r, s);
          return;
        }
      }
      launch_typed<Elem, D, false>(r, s);
    });
  });
}

}  // namespace pasa::cuda
