// SPDX-License-Identifier: Apache-2.0
// Causal masking checked against an oracle that shares no code with the library (naive_attention.h):
// the emulator and the library's fp64 reference call one mask helper, so comparing them with each
// other cannot catch a wrong mask rule. Tiny shapes with S_q != S_kv both ways, both alignments, and
// key/query blocks of 1, 2, 3 and 64 rows so every row and block boundary is a diagonal crossing.
#include <gtest/gtest.h>

#include <vector>

#include "mask_checks.h"
#include "naive_attention.h"
#include "test_util.h"

namespace pasa {
namespace {

using test::Mask;
using test::visible_prefix;

TEST(MaskOracle, VisiblePrefixesOfSmallShapesAsWrittenByHand) {
  // The oracle's rule, checked against tables written out by hand.
  struct Row {
    std::int64_t sq, skv;
    Mask mask;
    std::vector<std::int64_t> prefix;
  };
  const Row rows[] = {
      {2, 5, Mask::causal_bottom_right, {4, 5}},
      {2, 5, Mask::causal_top_left, {1, 2}},
      {5, 2, Mask::causal_bottom_right, {0, 0, 0, 1, 2}},
      {5, 2, Mask::causal_top_left, {1, 2, 2, 2, 2}},
      {3, 3, Mask::causal_bottom_right, {1, 2, 3}},
      {3, 3, Mask::none, {3, 3, 3}},
  };
  for (const Row& row : rows) {
    for (std::int64_t r = 0; r < row.sq; ++r) {
      EXPECT_EQ(visible_prefix(row.mask, r, row.sq, row.skv), row.prefix[r])
          << "S_q " << row.sq << " S_kv " << row.skv << " row " << r;
    }
  }
}

TEST(MaskOracle, IdentityValuesShowWhichKeysEachRowSees) {
  // V = I: row r of O is row r's attention weights, exactly zero where a key is masked.
  for (std::uint64_t seed : test::kFixedSeeds) test::check_mask_shapes(seed, test::MaskCheck::visible_sets);
}

TEST(MaskOracle, OutputsAndLseMatchTheNaiveOracle) {
  for (std::uint64_t seed : test::kFixedSeeds) test::check_mask_shapes(seed, test::MaskCheck::values);
}

}  // namespace
}  // namespace pasa
