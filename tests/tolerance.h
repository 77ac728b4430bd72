// SPDX-License-Identifier: Apache-2.0
// Error bounds for the tests, derived from the formats: the unit roundoff u of a format times a
// growth factor set by the length of the reduction. Nothing here looks at what an implementation
// actually produced; a bound is a property of the formats, the lengths and the input magnitudes.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "pasa/format.h"

namespace pasa::test {

// u = 2^-(t+1) for t fraction bits: rounding to nearest changes a normal value x by at most u |x|.
inline double unit_roundoff(const Format& f) { return std::ldexp(1.0, -f.man_bits - 1); }

// gamma_n = n u / (1 - n u): a sum of n terms (or a dot product of length n) accumulated one term at
// a time with every addition rounded is off by at most gamma_n times the sum of the terms' magnitudes
// (each term passes through at most n rounded operations, so it carries at most n factors (1 + d),
// |d| <= u, whose product lies within 1 +- gamma_n).
inline double gamma_n(double n, double u) {
  const double nu = n * u;
  return nu < 1.0 ? nu / (1.0 - nu) : std::numeric_limits<double>::infinity();
}

// What a softmax-weighted average of V may be off by, per output element, under an error model:
struct AttentionErrorModel {
  double score_err = 0.0;   // absolute error of each score, in the units of the softmax argument
  double score_range = 0.0; // max - min of a row's visible scores (x - m is rounded relative to it)
  double u_softmax = 0.0;   // unit roundoff of the softmax arithmetic (exp, row sums, rescales)
  double u_pv_acc = 0.0;    // unit roundoff of the P V GEMM's accumulator
  double u_o = 0.0;         // unit roundoff of O~ (the running output) and of O
  double p_rel = 0.0;       // relative error of each P element as the P V GEMM's operand
  double p_abs = 0.0;       // absolute error of a P element below the P format's normal range
  double block_len = 1;     // keys per key block (the length of each in-block sum)
  double n_kv = 1;          // keys a row sees
  double n_blocks = 1;      // key blocks (each rescales O~ and l once)
  double v_max = 1.0;       // max |v|
};

// The model of a policy whose every rounding point has unit roundoff u (fp32 for `exact`).
inline AttentionErrorModel uniform_model(double u, double block_len, double n_kv, double v_max) {
  AttentionErrorModel m;
  m.u_softmax = m.u_pv_acc = m.u_o = u;
  m.block_len = std::min(block_len, n_kv);
  m.n_kv = n_kv;
  m.n_blocks = std::ceil(n_kv / block_len);
  m.v_max = v_max;
  return m;
}

// Derivation. A row's output is O = sum_c w_c v_c with w_c = exp(s_c - m) / sum_c' exp(s_c' - m).
// 1. Scores: every s_c off by at most e (its own error, plus u_softmax |s_c - m| for rounding the
//    difference, plus u_softmax for exp's result) changes each exp by a factor in [e^-e, e^e], hence
//    each normalised weight by a factor in [e^-2e, e^2e]: sum_c |dw_c| |v_c| <= expm1(2e) v_max.
// 2. P as an operand: a relative error p_rel per element moves the numerator by p_rel v_max l; below
//    the normal range the error is at most p_abs per element, n_kv p_abs v_max in all; l >= 1 since
//    the largest exponential is exp(0) = 1, so dividing by l never amplifies it.
// 3. Sums of non-negative weights (relative to l v_max): a block's row sum has block_len terms and
//    every block rescales and adds into l (3 roundings each): gamma_{block_len + 3 n_blocks} in the
//    softmax format. A block's P V has block_len terms in the accumulator, and O~ collects 3 roundings
//    per block plus the final O~ / l: gamma_{block_len} + gamma_{3 n_blocks + 1} in O's format.
inline double attention_output_bound(const AttentionErrorModel& m) {
  const double e = m.score_err + m.u_softmax * (m.score_range + 1.0);
  const double row_sum = gamma_n(m.block_len + 3.0 * m.n_blocks, m.u_softmax);
  const double pv = gamma_n(m.block_len, m.u_pv_acc) + gamma_n(3.0 * m.n_blocks + 1.0, m.u_o);
  return m.v_max * (std::expm1(2.0 * e) + m.p_rel + m.n_kv * m.p_abs + row_sum + pv);
}

// The LSE = m + log l is off by the score error (through m and every exponential), by the relative
// error of l (log(1 + d) <= d for d >= 0, and -log(1 - d) <= 2 d for d <= 1/2) and by fp32 storage.
inline double lse_bound(const AttentionErrorModel& m, double lse_magnitude) {
  const double e = m.score_err + m.u_softmax * (m.score_range + 1.0);
  return e + 2.0 * gamma_n(m.block_len + 3.0 * m.n_blocks, m.u_softmax) +
         unit_roundoff(Format::fp32()) * std::fabs(lse_magnitude);
}

// Error of one score alpha * (q . k) computed by a GEMM of length d that accumulates in a format of
// unit roundoff u, rounded once more on output and once by the scaling: gamma_{d + 2} times
// alpha * sum_i |q_i k_i|, bounded by alpha d max|q| max|k|.
inline double dot_score_error(double d, double u, double alpha, double q_max, double k_max) {
  return gamma_n(d + 2.0, u) * alpha * d * q_max * k_max;
}

// A policy whose every rounding point is one format of unit roundoff u (fp32 for `exact`), on inputs
// bounded by q_max, k_max, v_max: scores from a length-dim GEMM, the row's scores within
// +-alpha dim q_max k_max of each other.
inline AttentionErrorModel dot_product_model(double u, double dim, double alpha, double q_max, double k_max,
                                             double v_max, double n_kv, double block_len) {
  AttentionErrorModel m = uniform_model(u, block_len, n_kv, v_max);
  m.score_err = dot_score_error(dim, u, alpha, q_max, k_max);
  m.score_range = 2.0 * alpha * dim * q_max * k_max;
  return m;
}

}  // namespace pasa::test
