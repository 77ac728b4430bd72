// SPDX-License-Identifier: Apache-2.0
// Q, K and V of one head made ready for the emulator's loop: rounded to the input format, smoothed,
// scaled, shifted (PASA) and quantized as the policy says, in that order, with everything needed to
// undo each step exactly at the end.
#pragma once

#include <cstdint>
#include <vector>

#include "attention_checks.h"
#include "numerics/rounder.h"
#include "pasa/attention.h"

namespace pasa {

// The policy's formats, compiled once per call.
struct Rounders {
  Rounder input, qk_acc, s, sm, sum, p, pv_acc, o;
  explicit Rounders(const Policy& pol)
      : input(pol.input), qk_acc(pol.qk_acc), s(pol.s), sm(pol.softmax), sum(pol.sum_acc), p(pol.p),
        pv_acc(pol.pv_acc), o(pol.o) {}
};

// One K/V head.
struct PreparedKV {
  std::vector<float> kt;          // K' per key block, block j at j * s2 * D, laid out [D][n_j]; with
                                  // PASA every block has s2 columns (a short last block padded)
  std::vector<float> shift_mean;  // PASA with pseudo_avg=k: per key block, M's row sum times the
                                  // block's mean key ([blocks][D]; as two terms of the input format)
  std::vector<double> k_scale;    // per key: dequantization scale (1 when not quantized)
  std::vector<float> k_used;      // [S_kv][D]: K as the GEMM sees it, before quantization (for dS),
                                  // times k_used_scale
  double k_used_scale = 1.0;      // 2 where smooth K's differences are stored halved (smoothed_divisor)
  std::vector<double> k_mean;     // [D]: subtracted by smooth K (zeros otherwise)
  std::vector<float> v;           // [S_kv][D], smoothed and quantized when asked
  std::vector<float> v_block_max; // PASA: per key block of s2 keys, the largest |v| (pasa_clamped_v: the headroom's O~ rule)
  std::vector<double> v_scale;    // [D]: per-channel dequantization scale (1 when not quantized)
  std::vector<double> v_mean;     // [D]: subtracted by smooth V, added back to O (zeros otherwise)
};

// One query head.
struct PreparedQ {
  std::vector<float> q;           // [S_q][D], ready for the GEMM
  std::vector<double> q_scale;    // per query: dequantization scale (1 when not quantized)
  std::vector<double> ds;         // [S_kv]: smooth Q's dS = q_m K^T (empty without smooth Q)
  std::vector<double> lse_offset; // [S_q]: alpha q . k_mean, what smooth K took out of the LSE
                                  // (natural units)
};

// What emulate_attention holds at once: every head's PreparedKV and PreparedQ (the fields above, at
// their sizes) and, per thread, the partial results and scratch of one query block (twice, for the
// unified max's recomputation). An upper estimate, checked against the memory budget before anything
// is allocated.
std::uint64_t emulator_memory_bytes(const ProblemShape& ps, const Policy& pol);

// alpha: the softmax scale in the scores' units (score_unit(policy) times the natural one).
PreparedKV prepare_kv(const AttentionArgs& args, const ProblemShape& ps, std::int64_t b,
                      std::int64_t h_kv, double alpha, const Rounders& R);
PreparedQ prepare_q(const AttentionArgs& args, const ProblemShape& ps, std::int64_t b, std::int64_t h,
                    const PreparedKV& kv, double alpha, const Rounders& R);

}  // namespace pasa
