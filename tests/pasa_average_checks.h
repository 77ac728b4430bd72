// SPDX-License-Identifier: Apache-2.0
// What PASA's running maximum is kept against. In real arithmetic any reference gives the same
// result; in fp16 it decides what overflows. Two inputs where it does, for `pasa,reference=average`,
// whose reference is G times the global pseudo-average F (Eq. 15: the mean of the blocks' local
// pseudo-averages so far), every term in fp16 (the preset's reference, the running maximum itself in
// fp32, holds these scores whole):
//   low_tail  39 key blocks of scores near 0, then one block near -72000. The average moves by 1/40
//             of that block's shifted mean (g * 40 ~ 2500 in the preset's base-2 units), where the
//             block's own mean would move the state by g * 1600 ~ 100000 > 65504: inf, then inf - inf
//             = NaN.
//   high_all  80 key blocks, every one's scores near +72000. The reference follows them (the state
//             stays ~1600 in the preset's base-2 units); measured against zero instead, the running
//             maximum itself is 104000 > 65504. Eq. 15's running sum (j - 1) F would pass 65504 at
//             the 41st block.
// The blocks near -72000 weigh exp(-72000) = 0: the output is attention over the other keys.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "one_head.h"
#include "pasa/format.h"
#include "pasa/policy.h"
#include "test_util.h"
#include "tolerance.h"

namespace pasa::test {

enum class BlockMeans { low_tail, high_all };

// Scores alpha q . k with alpha = 1/8 (D = 64): q = 1 + U(-1/2, 1/2) per element, so q . 1 ~ 64 and
// a key offset by -9000 (or +9000) in every channel scores -72000 (+72000) within 4%; noise keys
// k ~ U(-2, 2) score a few units. Values are fp16 numbers, as the preset's input format keeps them.
inline HeadProblem block_means_head(std::uint64_t seed, BlockMeans kind, std::int64_t block) {
  std::mt19937_64 rng(seed);
  auto fp16 = [](double x) { return round_to(Format::fp16(), x); };
  HeadProblem p;
  p.seq_q = 32;
  p.seq_kv = (kind == BlockMeans::high_all ? 80 : 40) * block;
  p.dim = 64;
  for (std::int64_t i = 0; i < p.seq_q * p.dim; ++i) p.q.push_back(fp16(1.0 + uniform(rng, -0.5, 0.5)));
  for (std::int64_t c = 0; c < p.seq_kv; ++c) {
    const bool last_block = c >= p.seq_kv - block;
    const double offset = kind == BlockMeans::high_all ? 9000.0 : last_block ? -9000.0 : 0.0;
    for (std::int64_t d = 0; d < p.dim; ++d) p.k.push_back(fp16(offset + uniform(rng, -2.0, 2.0)));
  }
  for (std::int64_t i = 0; i < p.seq_kv * p.dim; ++i) p.v.push_back(fp16(uniform(rng, -1.0, 1.0)));
  return p;
}

// low_tail: the last block weighs nothing, so the output must equal PASA's output on the first 39
// blocks alone up to the one extra rescale of O~ and l (a rounded product each, then O~ / l rounded
// once in both runs): gamma_4 of O's format relative to the output, plus half its subnormal quantum.
// high_all: every output finite and inside the range of V (an average with non-negative weights
// cannot leave it) up to the rounding of P, l and O in the preset's formats.
// `policy`: a pasa policy with key blocks of 32 (a block's sum of shifted scores, 32 x 1600, fits fp16
// however it is accumulated).
inline void check_block_means(std::uint64_t seed, BlockMeans kind, const char* policy = "pasa,s2=32") {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << (kind == BlockMeans::low_tail ? " low_tail " : " high_all ")
                                    << policy);
  const Policy pol = parse_policy(policy);
  const HeadProblem p = block_means_head(seed, kind, pol.block_kv);
  const HeadOutput got = run_head(p, pol);
  for (std::int64_t r = 0; r < p.seq_q; ++r) ASSERT_TRUE(std::isfinite(got.lse[r])) << "row " << r;
  for (std::size_t i = 0; i < got.o.size(); ++i) ASSERT_TRUE(std::isfinite(got.o[i])) << "element " << i;
  if (kind == BlockMeans::low_tail) {
    HeadProblem head = p;
    head.seq_kv -= pol.block_kv;
    head.k.resize(static_cast<std::size_t>(head.seq_kv * head.dim));
    head.v.resize(static_cast<std::size_t>(head.seq_kv * head.dim));
    const HeadOutput want = run_head(head, pol);
    const double u = unit_roundoff(pol.o);
    const double quantum = std::ldexp(1.0, pol.o.min_exponent() - pol.o.man_bits);
    for (std::size_t i = 0; i < got.o.size(); ++i) {
      ASSERT_NEAR(got.o[i], want.o[i], gamma_n(4, u) * std::fabs(want.o[i]) + quantum / 2) << "element " << i;
    }
    return;
  }
  AttentionErrorModel m = uniform_model(unit_roundoff(pol.softmax), pol.block_kv, static_cast<double>(p.seq_kv), max_abs(p.v));
  m.u_pv_acc = unit_roundoff(pol.pv_acc);
  m.p_rel = unit_roundoff(pol.p);
  const double slack = attention_output_bound(m);  // no score error: scores only move the weights
  for (std::int64_t d = 0; d < p.dim; ++d) {
    double lo = INFINITY, hi = -INFINITY;
    for (std::int64_t c = 0; c < p.seq_kv; ++c) {
      lo = std::min(lo, p.v[c * p.dim + d]);
      hi = std::max(hi, p.v[c * p.dim + d]);
    }
    for (std::int64_t r = 0; r < p.seq_q; ++r) {
      ASSERT_GE(got.o[r * p.dim + d], lo - slack) << "row " << r << " element " << d;
      ASSERT_LE(got.o[r * p.dim + d], hi + slack) << "row " << r << " element " << d;
    }
  }
}

}  // namespace pasa::test
