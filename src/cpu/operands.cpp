// SPDX-License-Identifier: Apache-2.0
#include "cpu/operands.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "cpu/host_inputs.h"
#include "cpu/score_mods.h"
#include "interrupt.h"
#include "memory_budget.h"
#include "numerics/pasa_headroom.h"
#include "numerics/pasa_shift.h"

namespace pasa {
namespace {

// Column means of a [rows][cols] matrix, in fp64.
std::vector<double> column_means(const std::vector<float>& a, std::int64_t rows, int cols) {
  std::vector<double> mean(static_cast<std::size_t>(cols), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (r % kRowsPerPoll == 0) poll_interrupt();
    for (int c = 0; c < cols; ++c) mean[c] += a[r * cols + c];
  }
  for (double& m : mean) m /= static_cast<double>(rows);
  return mean;
}

// What smoothing an operand keeps its differences divided by. x - mean reaches twice fp32's largest
// value where values of both signs are near it; where the operand is then quantized, whose scales
// absorb a power of two exactly, the differences are stored halved (the same bits as x - mean halved
// wherever that is a normal fp32 number) and the scales doubled, as the GPU prepass does for K
// (sage8_quantize.cuh). Unquantized, x - mean is the policy's fp32 rounding point, overflow included.
double smoothed_divisor(bool smooth, bool quantized) { return smooth && quantized ? 2.0 : 1.0; }

// Subtracts the column means in fp32 (what a smoothing prepass on the GPU produces), the differences
// divided by `divisor` (smoothed_divisor).
void subtract_means(std::vector<float>& a, std::int64_t rows, int cols, const std::vector<double>& mean,
                    double divisor) {
  for (std::int64_t r = 0; r < rows; ++r) {
    if (r % kRowsPerPoll == 0) poll_interrupt();
    for (int c = 0; c < cols; ++c) a[r * cols + c] = static_cast<float>((a[r * cols + c] - mean[c]) / divisor);
  }
}

void multiply(std::vector<double>& scales, double factor) {
  for (double& s : scales) s *= factor;
}

// The keys of K/V head (b, h_kv) that the attention mask hides from every row of every query head
// reading them (padding, say); empty without a mask.
std::vector<char> keys_masked_from_every_row(const AttentionArgs& args, const ProblemShape& ps, std::int64_t b,
                                             std::int64_t h_kv) {
  if (args.mask.kind == MaskKind::none) return {};
  const ScoreMods mods(args, ps);
  const std::int64_t group = ps.group();
  std::vector<char> hidden(static_cast<std::size_t>(ps.seq_kv), 1);
  for (std::int64_t c = 0; c < ps.seq_kv; ++c) {
    if (c % kRowsPerPoll == 0) poll_interrupt();
    for (std::int64_t h = h_kv * group; h < (h_kv + 1) * group && hidden[c]; ++h)
      for (std::int64_t r = 0; r < ps.seq_q && hidden[c]; ++r) hidden[c] = mods.mask_hides(b, h, r, c);
  }
  return hidden;
}

// Keys that every row's mask hides take no part in the statistics a policy takes over the keys
// (smooth K's and V's means, the quantizers' scales, PASA's block pseudo-averages), which garbage
// there (a padded batch's) would otherwise skew for the visible keys: each such row of K becomes its
// key block's mean visible key (the head's where the block has none), as a short last block's padding
// does, and its row of V 0. Their scores are masked, so only those statistics could see the values.
void neutralize_masked_keys(std::vector<float>& k, std::vector<float>& v, const std::vector<char>& hidden,
                            int D, int s2, const Rounder& input) {
  if (std::find(hidden.begin(), hidden.end(), 0) == hidden.end()) return;  // (none visible: nothing to keep)
  const auto S = static_cast<std::int64_t>(hidden.size());
  const auto mean_of_visible = [&](std::int64_t k0, std::int64_t k1) {
    std::vector<double> mean(static_cast<std::size_t>(D), 0.0);
    std::int64_t n = 0;
    for (std::int64_t c = k0; c < k1; ++c) {
      if (hidden[c]) continue;
      ++n;
      for (int d = 0; d < D; ++d) mean[d] += k[static_cast<std::size_t>(c * D + d)];
    }
    for (double& m : mean) m = n > 0 ? input(m / static_cast<double>(n)) : 0.0;
    return std::pair{mean, n};
  };
  const std::vector<double> head_mean = mean_of_visible(0, S).first;
  for (std::int64_t k0 = 0; k0 < S; k0 += s2) {
    poll_interrupt();
    const std::int64_t k1 = std::min(S, k0 + s2);
    const auto [block_mean, n] = mean_of_visible(k0, k1);
    const std::vector<double>& mean = n > 0 ? block_mean : head_mean;
    for (std::int64_t c = k0; c < k1; ++c) {
      if (!hidden[c]) continue;
      for (int d = 0; d < D; ++d) {
        k[static_cast<std::size_t>(c * D + d)] = static_cast<float>(mean[d]);
        v[static_cast<std::size_t>(c * D + d)] = 0.0f;
      }
    }
  }
}

// K' = M K for one block of n keys (row-major [n][D]) into `out`, as the kernels' prepass forms it
// (pasa_prepare.cu): M = (a' + b') I - b' J (algorithms.md section 3), so row r is
// (a' + b') k_r - b' colsum, with the block's column sums accumulated in qk_acc, b' colsum rounded to
// qk_acc, then one fused multiply-add per element rounded to qk_acc and stored in the input format.
// (The same product as a GEMM adds n terms whose partial sums grow to n |k|: with the large biases
// PASA is for, their roundings move a whole block's scores, which the state update's G ~ 64
// amplifies.)
void shift_block(const PasaShift& shift, const std::vector<float>& block, int n, int D, const Rounders& R,
                 std::vector<double>& out) {
  const double a = R.qk_acc(shift.diag - shift.off);
  for (int d = 0; d < D; ++d) {
    double colsum = 0.0;
    for (int r = 0; r < n; ++r) colsum = R.qk_acc(colsum + block[static_cast<std::size_t>(r) * D + d]);
    const double offset = R.qk_acc(shift.off * colsum);
    for (int r = 0; r < n; ++r) {
      const std::size_t i = static_cast<std::size_t>(r) * D + d;
      out[i] = R.input(R.qk_acc(a * block[i] + offset));
    }
  }
}

}  // namespace

std::uint64_t emulator_memory_bytes(const ProblemShape& ps, const Policy& pol) {
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  const std::uint64_t D = u(ps.dim), s1 = u(pol.block_q), s2 = u(pol.block_kv);
  // K as gathered, kt, k_used (a quantizer's copy) and v in fp32 and k_scale in fp64 per key, and for
  // PASA one block more (its padded last block, whose per-block shift means are counted with it); the
  // per-channel and per-block vectors are negligible.
  const std::uint64_t padding = pol.shift == Shift::pasa ? s2 : 0;
  const std::uint64_t per_kv_head = saturating_product({u(ps.seq_kv) + padding, 4 * 4 * D + 8});
  // q in fp32 and q_scale, lse_offset in fp64 per query; ds in fp64 per key.
  const std::uint64_t per_q_head =
      saturating_sum({saturating_product({u(ps.seq_q), 4 * D + 16}), saturating_product({u(ps.seq_kv), 8})});
  // One split's Partial (state and O~) plus run_key_range's scores, P and PV buffers, per query row,
  // for a task's rows (s1, or fewer queries) and the splits there are (no more than key blocks).
  const std::uint64_t per_row = 64 + 8 * D + 12 * s2 + 8 * D;
  const std::uint64_t rows = std::min(s1, u(ps.seq_q));
  const std::uint64_t key_blocks = u(ps.seq_kv) / s2 + 1;
  const std::uint64_t splits = std::min(u(std::max(pol.splits, 1)), key_blocks);
  const std::uint64_t per_thread = saturating_product({2 * (splits + 1), rows, per_row});
  // Every product saturates: broadcast (stride-0) views can name 2^64 heads or more.
  return saturating_sum({saturating_product({u(ps.batch), u(ps.heads_kv), per_kv_head}),
                         saturating_product({u(ps.batch), u(ps.heads_q), per_q_head}),
                         saturating_product({u(omp_get_max_threads()), per_thread})});
}

PreparedKV prepare_kv(const AttentionArgs& args, const ProblemShape& ps, std::int64_t b,
                      std::int64_t h_kv, double alpha, const Rounders& R) {
  const Policy& pol = args.policy;
  const int D = static_cast<int>(ps.dim);
  const int s2 = pol.block_kv;
  const std::int64_t S = ps.seq_kv;
  PreparedKV out;
  // Each pass below reads every key once and polls Ctrl-C every kRowsPerPoll rows (poll_interrupt), as
  // a long decode row's keys are one task.
  std::vector<float> k = gather_head<float>(args.k, b, h_kv, R.input);
  poll_interrupt();
  out.v = gather_head<float>(args.v, b, h_kv, R.input);
  poll_interrupt();
  const bool key_statistics =
      pol.smooth_k || pol.smooth_v || pol.k_quant || pol.v_quant || pol.shift == Shift::pasa;
  if (key_statistics) neutralize_masked_keys(k, out.v, keys_masked_from_every_row(args, ps, b, h_kv), D, s2, R.input);
  out.k_mean.assign(D, 0.0);
  out.k_used_scale = smoothed_divisor(pol.smooth_k, pol.k_quant.has_value());
  if (pol.smooth_k) {
    out.k_mean = column_means(k, S, D);
    subtract_means(k, S, D, out.k_mean, out.k_used_scale);
    poll_interrupt();
  }
  if (pol.shift != Shift::pasa && pol.scale == ScalePlacement::key) {
    const double a = R.input(alpha);
    for (std::int64_t r = 0; r < S; ++r) {
      if (r % kRowsPerPoll == 0) poll_interrupt();
      float* row = &k[static_cast<std::size_t>(r * D)];
      for (int d = 0; d < D; ++d) row[d] = static_cast<float>(R.input(a * row[d]));
    }
  }
  if (pol.shift == Shift::pasa) {
    // K'_j = M K_j per key block (shift_block), stored in the input format. Every block has s2 rows:
    // a short last block of n keys is padded with s2 - n copies of its own mean key (in the input
    // format), so that M, its invariance G and the block's shift are those of a full block (the
    // padded keys count in the block's pseudo-average and are masked out of the softmax). A short
    // block shifted by its own n would need its own G, which the state update cannot carry exactly.
    const PasaShift shift = pasa_shift(pol.beta, s2, pol.scale == ScalePlacement::key ? alpha : 1.0,
                                       pol.input);
    const std::int64_t blocks = (S + s2 - 1) / s2;
    std::vector<float> block(static_cast<std::size_t>(s2) * D);
    std::vector<double> shifted(static_cast<std::size_t>(s2) * D);
    out.kt.reserve(static_cast<std::size_t>(blocks * s2 * D));  // filled a block at a time, polled between
    for (std::int64_t j = 0; j < blocks; ++j) {
      poll_interrupt();
      out.kt.resize(static_cast<std::size_t>((j + 1) * s2 * D));
      const std::int64_t k0 = j * s2;
      const int n = static_cast<int>(std::min<std::int64_t>(s2, S - k0));
      std::copy_n(&k[static_cast<std::size_t>(k0 * D)], static_cast<std::size_t>(n) * D, block.begin());
      if (n < s2) {
        std::vector<float> tail(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(n) * D);
        const std::vector<double> mean = column_means(tail, n, D);
        for (int r = n; r < s2; ++r)
          for (int d = 0; d < D; ++d) block[static_cast<std::size_t>(r) * D + d] = static_cast<float>(R.input(mean[d]));
      }
      shift_block(shift, block, s2, D, R, shifted);
      if (pol.pseudo_avg == PseudoAverage::keys) {
        // The row in the input format as two terms, hi + lo (the rest, scaled into hi's range and
        // back): about twice the format's bits, as a kernel whose operands are in that format holds it.
        const double lo_scale = std::ldexp(1.0, pol.input.man_bits + 1);
        const double row_sum = shift.diag + (s2 - 1) * shift.off;
        for (const double mean : column_means(block, s2, D)) {
          const double hi = R.input(row_sum * mean);
          out.shift_mean.push_back(static_cast<float>(hi + R.input((row_sum * mean - hi) * lo_scale) / lo_scale));
        }
      }
      float* dst = &out.kt[static_cast<std::size_t>(k0 * D)];
      for (int c = 0; c < s2; ++c)
        for (int d = 0; d < D; ++d) dst[d * s2 + c] = static_cast<float>(shifted[static_cast<std::size_t>(c) * D + d]);
      for (int c = 0; c < n; ++c)
        for (int d = 0; d < D; ++d) k[static_cast<std::size_t>((k0 + c) * D + d)] = dst[d * s2 + c];
    }
  }
  out.k_scale.assign(static_cast<std::size_t>(S), 1.0);
  if (pol.k_quant) {
    // (k itself is quantized in place) Copied in polled chunks: a gigabyte's copy takes seconds.
    out.k_used.reserve(k.size());
    const std::size_t chunk = static_cast<std::size_t>(kRowsPerPoll) * D;
    for (std::size_t i = 0; i < k.size(); i += chunk) {
      poll_interrupt();
      out.k_used.insert(out.k_used.end(), k.begin() + static_cast<std::ptrdiff_t>(i),
                        k.begin() + static_cast<std::ptrdiff_t>(std::min(k.size(), i + chunk)));
    }
    out.k_scale = quantize_rows(k, static_cast<int>(S), D, *pol.k_quant, pol.k_gran, OperandRole::key, s2);
    multiply(out.k_scale, out.k_used_scale);
    poll_interrupt();
  }
  if (pol.shift != Shift::pasa) {
    out.kt.reserve(k.size());  // filled a block at a time, Ctrl-C polled between blocks
    for (std::int64_t k0 = 0; k0 < S; k0 += s2) {
      poll_interrupt();
      const int n = static_cast<int>(std::min<std::int64_t>(s2, S - k0));
      out.kt.resize(static_cast<std::size_t>((k0 + n) * D));
      float* dst = &out.kt[static_cast<std::size_t>(k0 * D)];
      for (int c = 0; c < n; ++c)
        for (int d = 0; d < D; ++d) dst[d * n + c] = k[static_cast<std::size_t>((k0 + c) * D + d)];
    }
  }
  if (!pol.k_quant) out.k_used = std::move(k);  // (no copy: k is not needed past here)

  out.v_mean.assign(D, 0.0);
  const double v_divisor = smoothed_divisor(pol.smooth_v, pol.v_quant.has_value());
  if (pol.smooth_v) {
    out.v_mean = column_means(out.v, S, D);
    subtract_means(out.v, S, D, out.v_mean, v_divisor);
    poll_interrupt();
  }
  out.v_scale.assign(D, 1.0);
  if (pol.v_quant) {
    out.v_scale = quantize_columns(out.v, static_cast<int>(S), D, *pol.v_quant);
    multiply(out.v_scale, v_divisor);
  }
  if (pol.shift == Shift::pasa) {  // (numerics/pasa_headroom.h)
    out.v_block_max.assign(static_cast<std::size_t>((S + s2 - 1) / s2), 0.0f);
    for (std::int64_t c = 0; c < S; ++c) {
      if (c % kRowsPerPoll == 0) poll_interrupt();
      float& largest = out.v_block_max[static_cast<std::size_t>(c / s2)];
      for (int d = 0; d < D; ++d) largest = std::fmax(largest, std::fabs(out.v[static_cast<std::size_t>(c * D + d)]));
    }
    for (float& largest : out.v_block_max) largest = pasa_clamped_v(largest);
  }
  return out;
}

PreparedQ prepare_q(const AttentionArgs& args, const ProblemShape& ps, std::int64_t b, std::int64_t h,
                    const PreparedKV& kv, double alpha, const Rounders& R) {
  const Policy& pol = args.policy;
  const int D = static_cast<int>(ps.dim);
  const std::int64_t S = ps.seq_q;
  PreparedQ out;
  out.q = gather_head<float>(args.q, b, h, R.input);
  if (pol.scale == ScalePlacement::query) {
    const double a = R.input(alpha);
    for (std::int64_t r = 0; r < S; ++r) {
      if (r % kRowsPerPoll == 0) poll_interrupt();
      float* row = &out.q[static_cast<std::size_t>(r * D)];
      for (int d = 0; d < D; ++d) row[d] = static_cast<float>(R.input(a * row[d]));
    }
  }
  // Smooth K removed q . k_mean from every score of row r: a per-row constant, invisible to the
  // softmax but part of the LSE.
  out.lse_offset.assign(static_cast<std::size_t>(S), 0.0);
  if (pol.smooth_k) {
    // (in natural units: alpha and the pre-scaled Q are in the scores' units, score_unit)
    const double factor = (pol.scale == ScalePlacement::query ? 1.0 : alpha) / score_unit(pol);
    for (std::int64_t r = 0; r < S; ++r) {
      if (r % kRowsPerPoll == 0) poll_interrupt();
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += out.q[r * D + d] * kv.k_mean[d];
      out.lse_offset[r] = factor * dot;
    }
  }
  const double q_divisor = smoothed_divisor(pol.smooth_q, pol.q_quant.has_value());
  if (pol.smooth_q) {
    const std::vector<double> q_mean = column_means(out.q, S, D);
    subtract_means(out.q, S, D, q_mean, q_divisor);
    // dS = q_m K^T: one value per key, added to every row of S (a GEMV next to the kernel).
    out.ds.assign(static_cast<std::size_t>(ps.seq_kv), 0.0);
    for (std::int64_t c = 0; c < ps.seq_kv; ++c) {
      if (c % kRowsPerPoll == 0) poll_interrupt();
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += q_mean[d] * kv.k_used[c * D + d];
      out.ds[c] = static_cast<float>(dot * kv.k_used_scale);  // computed in fp32 on the GPU
    }
  }
  out.q_scale.assign(static_cast<std::size_t>(S), 1.0);
  if (pol.q_quant) {
    out.q_scale = quantize_rows(out.q, static_cast<int>(S), D, *pol.q_quant, pol.q_gran, OperandRole::query,
                                pol.block_q);
    multiply(out.q_scale, q_divisor);
  }
  return out;
}

}  // namespace pasa
