// SPDX-License-Identifier: Apache-2.0
// pasa::compare: the error measures of an output against its reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "pasa/error.h"
#include "pasa/metrics.h"

namespace pasa {
namespace {

// The measures of {3, 1} against {2, 1} (|O - O'| = 1, |O'| = sqrt 5, O O' = 7, |O| = sqrt 10),
// the values multiplied by `unit`: the ratios do not change and rmse, max_abs scale with it. Near
// 1e-200 the squares underflowed (rel_rmse 0, cos_sim 1), near 1e200 they overflowed (NaN, inf).
TEST(Compare, MeasuresHoldAtAnyMagnitude) {
  for (const double unit : {1.0, 1e-200, 1e200, 1e-310}) {
    SCOPED_TRACE(unit);
    const ErrorMetrics m = compare({3 * unit, 1 * unit}, {2 * unit, 1 * unit});
    EXPECT_NEAR(m.rel_rmse, 1 / std::sqrt(5.0), 1e-12);
    EXPECT_NEAR(m.cos_sim, 7 / std::sqrt(50.0), 1e-12);
    EXPECT_NEAR(m.rel_l1, 1 / 3.0, 1e-12);
    EXPECT_NEAR(m.rmse / unit, std::sqrt(0.5), 1e-12);
    EXPECT_NEAR(m.max_abs / unit, 1.0, 1e-12);
    EXPECT_EQ(m.nan_share, 0.0);
  }
}

TEST(Compare, ZerosAndNonFiniteOutputs) {
  const ErrorMetrics zeros = compare({0.0, 0.0}, {0.0, 0.0});
  EXPECT_EQ(zeros.rel_rmse, 0.0);
  EXPECT_EQ(zeros.cos_sim, 1.0);
  EXPECT_EQ(zeros.rmse, 0.0);
  const ErrorMetrics nan = compare({NAN, 1.0}, {1.0, 1.0});
  EXPECT_EQ(nan.nan_share, 0.5);
  EXPECT_TRUE(std::isnan(nan.rel_rmse));
  EXPECT_THROW(compare({1.0}, {INFINITY}), Error);
}

}  // namespace
}  // namespace pasa
