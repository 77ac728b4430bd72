// SPDX-License-Identifier: Apache-2.0
// PASA's global pseudo-average (Eq. 15) on inputs where using each block's own mean, or no reference
// at all, overflows fp16 (pasa_average_checks.h explains the two inputs).
#include <gtest/gtest.h>

#include "pasa_average_checks.h"
#include "test_util.h"

namespace pasa {
namespace {

TEST(PasaAverage, ALowLastBlockMovesTheReferenceByItsShareOnly) {
  for (std::uint64_t seed : test::kFixedSeeds) test::check_block_means(seed, test::BlockMeans::low_tail);
}

TEST(PasaAverage, ScoresBeyondFp16StayFiniteWhenEveryBlockIsHigh) {
  for (std::uint64_t seed : test::kFixedSeeds) test::check_block_means(seed, test::BlockMeans::high_all);
}

}  // namespace
}  // namespace pasa
