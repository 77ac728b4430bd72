// SPDX-License-Identifier: Apache-2.0
// The host side of the split-KV decode path: how many splits, the workspace (from pasa's pool), and
// the launches. With FlashDecoding++'s unified max the sequence is: split kernel (unified) -> merge
// (rows whose x - phi left the window are flagged and counted, not written) -> split kernel again in
// synchronized mode (CTAs holding no flagged row return at once) -> merge of the flagged rows. All of
// it is stream-ordered on the caller's stream; only counting the recomputed rows for
// AttentionStats waits for the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/decode_params.h"
#include "cuda/device_pool.h"
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

long long run_decode(const DecodeRequest& r, bool count_recomputed, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const DecodeTile tile = decode_tile(r.head_dim);
  DecodeParams p{};
  p.fwd = r.fwd;
  p.heads_kv = r.heads_kv;
  p.rows = r.fwd.group * r.fwd.seq_q;
  const int m_tiles = p.rows <= 16 ? 1 : kDecodeMaxMTiles;
  p.row_chunks = (p.rows + 16 * m_tiles - 1) / (16 * m_tiles);

  int sm_count = 0;
  check_cuda(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, r.device),
             "cudaDeviceGetAttribute(multiprocessor count)");
  const int seq_kv = r.fwd.seq_kv;
  int splits = r.policy_splits > 1
                   ? r.policy_splits
                   : choose_decode_splits(static_cast<long long>(r.batch) * r.heads_kv * p.row_chunks, seq_kv,
                                          tile.block_n, sm_count, tile.ctas_per_sm);
  // Split boundaries on whole key tiles; no empty split.
  const int per_split = (seq_kv + splits - 1) / splits;
  p.split_keys = (per_split + tile.block_n - 1) / tile.block_n * tile.block_n;
  splits = (seq_kv + p.split_keys - 1) / p.split_keys;
  p.splits = splits;

  p.round_s = r.fdpp_formats;
  p.unified = r.unified;
  p.alpha = static_cast<float>(std::fabs(r.alpha));
  p.phi = static_cast<float>(r.phi);
  p.phi_log2 = static_cast<float>(r.phi * 1.4426950408889634);
  p.window_lo = static_cast<float>(r.window_lo);
  p.window_hi = static_cast<float>(r.window_hi);
  p.direct = splits == 1 && !r.unified;

  // Workspace: the splits' partials, the flags and the counter (none when the CTAs write O directly).
  const std::size_t R = static_cast<std::size_t>(r.batch) * r.heads_kv * p.rows;
  const std::size_t o_bytes = align_up(static_cast<std::size_t>(splits) * R * r.head_dim * sizeof(float));
  const std::size_t ml_bytes = align_up(static_cast<std::size_t>(splits) * R * 2 * sizeof(float));
  const std::size_t flag_bytes = align_up(static_cast<std::size_t>(splits) * R * sizeof(int));
  const std::size_t row_flag_bytes = align_up(R * sizeof(int));
  const std::size_t total = p.direct ? 0 : o_bytes + ml_bytes + flag_bytes + row_flag_bytes + 256;
  StreamBuffer workspace(total, r.device, stream);
  if (!p.direct) {
    char* w = static_cast<char*>(workspace.get());
    p.part_o = reinterpret_cast<float*>(w);
    p.part_ml = reinterpret_cast<float*>(w + o_bytes);
    p.part_flag = reinterpret_cast<int*>(w + o_bytes + ml_bytes);
    p.row_flag = reinterpret_cast<int*>(w + o_bytes + ml_bytes + flag_bytes);
    p.counter = reinterpret_cast<int*>(w + o_bytes + ml_bytes + flag_bytes + row_flag_bytes);
  }
  const bool to_half = r.fdpp_formats && r.in_type == ElemType::bf16;

  launch_decode_split(p, r.batch, r.head_dim, m_tiles, r.in_type, to_half, stream);
  if (!p.direct) launch_decode_merge(p, r.batch, r.head_dim, 0, stream);
  if (!p.unified) return 0;

  // FlashDecoding++'s fallback: the flagged rows again with the synchronized (max-tracking) algorithm
  // over the same splits, merged exactly.
  DecodeParams sync = p;
  sync.unified = false;
  sync.recompute = true;
  launch_decode_split(sync, r.batch, r.head_dim, m_tiles, r.in_type, to_half, stream);
  launch_decode_merge(sync, r.batch, r.head_dim, 1, stream);
  if (!count_recomputed) return 0;
  int recomputed = 0;
  check_cuda(cudaMemcpyAsync(&recomputed, p.counter, sizeof(int), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (recomputed rows)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (AttentionStats)");
  return recomputed;
}

}  // namespace pasa::cuda
