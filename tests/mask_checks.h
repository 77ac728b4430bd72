// SPDX-License-Identifier: Apache-2.0
// The causal-mask checks against the independent oracle (naive_attention.h), one seed at a time: the
// fast tests run them on the fixed seeds, the slow sweep on many.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "naive_attention.h"
#include "one_head.h"
#include "pasa/policy.h"
#include "test_util.h"
#include "tolerance.h"

namespace pasa::test {

enum class MaskCheck {
  visible_sets,  // V = I: O's row r is row r's weights, > 0 exactly on the keys the oracle allows
  values,        // random V: O and the LSE within the fp32 bound of the oracle's
};

inline HeadProblem random_head(std::mt19937_64& rng, std::int64_t sq, std::int64_t skv, std::int64_t dim) {
  HeadProblem p;
  p.seq_q = sq;
  p.seq_kv = skv;
  p.dim = dim;
  for (std::int64_t i = 0; i < sq * dim; ++i) p.q.push_back(uniform(rng, -1.0, 1.0));
  for (std::int64_t i = 0; i < skv * dim; ++i) p.k.push_back(uniform(rng, -1.0, 1.0));
  for (std::int64_t i = 0; i < skv * dim; ++i) p.v.push_back(uniform(rng, -1.0, 1.0));
  return p;
}

// fp32 everywhere (the exact policy).
inline AttentionErrorModel exact_policy_model(const HeadProblem& p, int block_kv) {
  const double alpha = p.scale.value_or(1.0 / std::sqrt(static_cast<double>(p.dim)));
  return dot_product_model(unit_roundoff(Format::fp32()), static_cast<double>(p.dim), alpha, max_abs(p.q),
                           max_abs(p.k), max_abs(p.v), static_cast<double>(p.seq_kv), block_kv);
}

inline void check_mask_case(std::uint64_t seed, MaskCheck check, std::int64_t sq, std::int64_t skv,
                            Mask mask, int block_q, int block_kv) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " S_q " << sq << " S_kv " << skv << " mask "
                                    << static_cast<int>(mask) << " s1 " << block_q << " s2 " << block_kv);
  std::mt19937_64 rng(seed);
  const std::int64_t dim = check == MaskCheck::visible_sets ? skv : 8;
  HeadProblem p = random_head(rng, sq, skv, dim);
  if (check == MaskCheck::visible_sets) {
    for (std::int64_t c = 0; c < skv; ++c)
      for (std::int64_t d = 0; d < dim; ++d) p.v[c * dim + d] = c == d ? 1.0 : 0.0;
  }
  p.causal = mask != Mask::none;
  p.alignment = mask == Mask::causal_top_left ? CausalAlignment::top_left : CausalAlignment::bottom_right;
  Policy policy = parse_policy("exact");
  policy.block_q = block_q;
  policy.block_kv = block_kv;
  const double alpha = 1.0 / std::sqrt(static_cast<double>(dim));
  const NaiveResult want = naive_attention(p.q, p.k, p.v, sq, skv, dim, alpha, mask);
  const AttentionErrorModel model = exact_policy_model(p, block_kv);
  const double o_tol = attention_output_bound(model);

  for (const bool emulator : {true, false}) {
    SCOPED_TRACE(emulator ? "emulator" : "fp64 reference");
    const HeadOutput got = emulator ? run_head(p, policy) : reference_head(p);
    for (std::int64_t r = 0; r < sq; ++r) {
      const std::int64_t n = visible_prefix(mask, r, sq, skv);
      if (n == 0) {
        ASSERT_TRUE(std::isinf(got.lse[r]) && got.lse[r] < 0) << "row " << r << " sees no key";
      } else {
        ASSERT_NEAR(got.lse[r], want.lse[r], lse_bound(model, want.lse[r])) << "row " << r;
      }
      for (std::int64_t d = 0; d < dim; ++d) {
        const double x = got.o[r * dim + d];
        if (check == MaskCheck::visible_sets) {
          if (d < n) {
            ASSERT_GT(x, 0.0) << "row " << r << " must see key " << d;
          } else {
            ASSERT_EQ(x, 0.0) << "row " << r << " must not see key " << d;
          }
        }
        ASSERT_NEAR(x, want.o[r * dim + d], o_tol) << "row " << r << " element " << d;
      }
    }
  }
}

// Shapes with S_q != S_kv both ways (bottom-right rows that see nothing included), every alignment,
// blocks that cut the diagonal at every offset.
inline void check_mask_shapes(std::uint64_t seed, MaskCheck check) {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1}, {1, 7}, {7, 1}, {2, 5}, {5, 2},
                                                          {9, 4}, {4, 9}, {17, 13}, {13, 17}};
  const std::pair<int, int> blocks[] = {{1, 1}, {2, 3}, {3, 2}, {16, 64}};
  for (auto [sq, skv] : shapes)
    for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right})
      for (auto [bq, bkv] : blocks) check_mask_case(seed, check, sq, skv, mask, bq, bkv);
}

}  // namespace pasa::test
