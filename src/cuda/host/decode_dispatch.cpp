// SPDX-License-Identifier: Apache-2.0
// The host side of the split-KV decode path: how many splits and the workspace layout (planned once
// per shape), and the launches into a workspace the caller owns: the split kernel, whose last split
// of each group merges it (eager calls), or the split kernel and the merge kernel (calls captured into
// a CUDA graph; decode_params.h says why). FlashDecoding++'s unified max needs nothing more: its
// fallback for rows that leave the window runs inside the split kernel. All of it is stream-ordered on
// the caller's stream; only counting the recomputed rows for AttentionStats waits for the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/decode_params.h"
#include "cuda/host/device_pool.h"  // align_up
#include "pasa/error.h"

namespace pasa::cuda {

int choose_decode_splits(long long base_ctas, int seq_kv, int block_n, int sm_count, int ctas_per_sm) {
  const int tiles = (seq_kv + block_n - 1) / block_n;
  const int max_splits = std::max(1, std::min(128, tiles / 2));
  const long long capacity = static_cast<long long>(std::max(sm_count, 1)) * ctas_per_sm;
  if (base_ctas <= 0 || max_splits == 1) return 1;
  // The fraction of CTA slots busy over the whole run, per split count (whole waves are best).
  const auto efficiency = [&](int s) {
    const long long n = base_ctas * s;
    const long long waves = (n + capacity - 1) / capacity;
    return static_cast<double>(n) / static_cast<double>(waves * capacity);
  };
  double best = 0.0;
  for (int s = 1; s <= max_splits; ++s) best = std::max(best, efficiency(s));
  // The fewest splits within 85% of the best: fewer, longer splits stream longer runs of K / V.
  for (int s = 1; s <= max_splits; ++s) {
    if (efficiency(s) >= 0.85 * best) return s;
  }
  return 1;
}

DecodePlan plan_decode(const DecodeShape& shape, int sm_count, int max_smem) {
  DecodePlan plan{};
  plan.rows = shape.group * shape.seq_q;
  plan.m_tiles = decode_m_tiles(shape.head_dim, plan.rows);
  const DecodeTile tile = decode_tile_for(shape.head_dim, plan.m_tiles, max_smem);
  plan.compact = decode_tile_is_compact(tile);
  plan.row_chunks = (plan.rows + 16 * plan.m_tiles - 1) / (16 * plan.m_tiles);
  int splits = shape.policy_splits > 1
                   ? shape.policy_splits
                   : choose_decode_splits(static_cast<long long>(shape.batch) * shape.heads_kv * plan.row_chunks,
                                          shape.seq_kv, tile.block_n, sm_count, tile.ctas_per_sm);
  // Split boundaries on whole key tiles; no empty split at the full length (the kernel cuts this many
  // splits again with the same keys a split).
  const int split_keys = decode_split_keys(shape.seq_kv, splits, tile.block_n);
  plan.splits = (shape.seq_kv + split_keys - 1) / split_keys;
  plan.direct = plan.splits == 1;
  // Workspace: the splits' partials, flags and the groups' arrival counters (none when the CTAs write
  // O directly), then the counter of flagged rows (the unified max only).
  if (!plan.direct) {
    const std::size_t R = static_cast<std::size_t>(shape.batch) * shape.heads_kv * plan.rows;
    const std::size_t S = static_cast<std::size_t>(plan.splits);
    const std::size_t groups = static_cast<std::size_t>(shape.batch) * shape.heads_kv * plan.row_chunks;
    plan.o_bytes = align_up(S * R * shape.head_dim * sizeof(float));
    plan.ml_bytes = align_up(S * R * 2 * sizeof(float));
    plan.flag_bytes = align_up(S * R * sizeof(int));
    plan.arrival_bytes = align_up(groups * sizeof(std::uint64_t));
  }
  plan.workspace_bytes =
      plan.o_bytes + plan.ml_bytes + plan.flag_bytes + plan.arrival_bytes + (shape.unified ? 256 : 0);
  return plan;
}

long long run_decode(const DecodePlan& plan, const DecodeRequest& r, void* workspace,
                     bool count_recomputed, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  DecodeParams p{};
  p.fwd = r.fwd;
  p.cache = r.cache;
  p.heads_kv = r.heads_kv;
  p.rows = plan.rows;
  p.row_chunks = plan.row_chunks;
  p.splits = plan.splits;
  p.direct = plan.direct;
  p.chunk_rows = 16 * plan.m_tiles;
  if (!p.direct) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
    p.merge_in_last_split = capture == cudaStreamCaptureStatusNone;
  }
  p.round_s = r.fdpp_formats;
  p.unified = r.unified;
  p.alpha = static_cast<float>(std::fabs(r.alpha));
  p.phi = static_cast<float>(r.phi);
  p.phi_log2 = static_cast<float>(r.phi * 1.4426950408889634);
  p.window_lo = static_cast<float>(r.window_lo);
  p.window_hi = static_cast<float>(r.window_hi);
  char* w = static_cast<char*>(workspace);
  if (!p.direct) {
    p.part_o = reinterpret_cast<float*>(w);
    p.part_ml = reinterpret_cast<float*>(w + plan.o_bytes);
    p.part_flag = reinterpret_cast<int*>(w + plan.o_bytes + plan.ml_bytes);
    p.arrivals = reinterpret_cast<std::uint64_t*>(w + plan.o_bytes + plan.ml_bytes + plan.flag_bytes);
  }
  if (count_recomputed && p.unified) {  // (the synchronized softmax recomputes nothing)
    p.counter = reinterpret_cast<int*>(w + plan.o_bytes + plan.ml_bytes + plan.flag_bytes + plan.arrival_bytes);
    check_cuda(cudaMemsetAsync(p.counter, 0, sizeof(int), stream), "cudaMemsetAsync (recomputed rows)");
  }
  const bool to_half = r.fdpp_formats && r.in_type == ElemType::bf16;
  launch_decode_split(p, r.batch, r.head_dim, plan.m_tiles, plan.compact, r.in_type, to_half, r.dependent_launch,
                      stream);
  if (!p.direct && !p.merge_in_last_split) launch_decode_merge(p, r.batch, r.head_dim, r.dependent_launch, stream);
  if (p.counter == nullptr) return 0;
  int recomputed = 0;
  check_cuda(cudaMemcpyAsync(&recomputed, p.counter, sizeof(int), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (recomputed rows)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (AttentionStats)");
  return recomputed;
}

}  // namespace pasa::cuda
