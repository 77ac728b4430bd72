// SPDX-License-Identifier: Apache-2.0
// PASA's references, the running maximum (the preset's) and the global pseudo-average (Eq. 15), on
// inputs where using each block's own mean, or no reference at all, overflows fp16
// (pasa_average_checks.h explains the two inputs); the shift of keys with a large bias; where the
// block's local pseudo-average is taken.
#include <gtest/gtest.h>

#include "pasa_average_checks.h"
#include "test_util.h"

namespace pasa {
namespace {

TEST(PasaAverage, ALowLastBlockMovesTheReferenceByItsShareOnly) {
  for (const char* policy : {"pasa,s2=32", "pasa,s2=32,reference=average"}) {
    for (std::uint64_t seed : test::kFixedSeeds) test::check_block_means(seed, test::BlockMeans::low_tail, policy);
  }
}

TEST(PasaAverage, ScoresBeyondFp16StayFiniteWhenEveryBlockIsHigh) {
  for (const char* policy : {"pasa,s2=32", "pasa,s2=32,reference=average"}) {
    for (std::uint64_t seed : test::kFixedSeeds) test::check_block_means(seed, test::BlockMeans::high_all, policy);
  }
}

// The same high scores with the kernels' key blocks of 128: keys near 9000, so the column sums behind
// K' = M K reach 1.2e6. Formed as a GEMM (s2 products a row, partial sums near 1e4) the fp32
// roundings moved whole blocks' scores, which G ~ 64 amplified: relative RMSE 0.30. The prepass's
// form, (a' + b') k - b' colsum, keeps the blocks' offsets: the output is as accurate as
// pasa_accurate's.
TEST(PasaShift, BlocksKeepTheirOffsetsOnKeysWithALargeBias) {
  for (std::uint64_t seed : test::kFixedSeeds) {
    for (const char* name : {"pasa", "pasa_accurate"}) {
      const Policy pol = preset_policy(name);
      const test::HeadProblem p = test::block_means_head(seed, test::BlockMeans::high_all, pol.block_kv);
      const double err = test::relative_rmse(test::run_head(p, pol).o, test::reference_head(p).o);
      EXPECT_LT(err, 1e-2) << name << " seed " << seed;
    }
  }
}

// pseudo_avg=acc takes the block's mean of S' before its rounding to `s`, pseudo_avg=s after it: the
// same mean where S' stays in fp32, a different one where it is rounded to fp16.
TEST(PasaShift, AccumulatedMeanIsTheRoundedOneWhereScoresStayFp32) {
  const test::HeadProblem p = test::block_means_head(7, test::BlockMeans::low_tail, 32);
  auto run = [&](const char* text) { return test::run_head(p, parse_policy(text)); };
  const test::HeadOutput acc32 = run("pasa_accurate,pseudo_avg=acc,s2=32"), s32 = run("pasa_accurate,pseudo_avg=s,s2=32");
  EXPECT_EQ(acc32.o, s32.o);
  EXPECT_EQ(acc32.lse, s32.lse);
  EXPECT_NE(run("pasa,s2=32").lse, run("pasa,pseudo_avg=s,s2=32").lse);
}

}  // namespace
}  // namespace pasa
