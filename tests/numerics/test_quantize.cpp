// SPDX-License-Identifier: Apache-2.0
// SageAttention2's quantizers on hand-checked cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "pasa/metrics.h"
#include "pasa/quantize.h"
#include "test_util.h"

namespace pasa {
namespace {

TEST(Quantize, GroupShapesFollowTheMmaLayouts) {
  // Queries per thread: rows r and r + 8 of each 16-row warp slab share a scale.
  EXPECT_EQ(quant_group(Granularity::thread, OperandRole::query, 3, 128),
            quant_group(Granularity::thread, OperandRole::query, 11, 128));
  EXPECT_NE(quant_group(Granularity::thread, OperandRole::query, 3, 128),
            quant_group(Granularity::thread, OperandRole::query, 4, 128));
  EXPECT_NE(quant_group(Granularity::thread, OperandRole::query, 3, 128),
            quant_group(Granularity::thread, OperandRole::query, 19, 128));
  // Keys per thread: within a key block, keys with the same index mod 8.
  EXPECT_EQ(quant_group(Granularity::thread, OperandRole::key, 2, 64),
            quant_group(Granularity::thread, OperandRole::key, 58, 64));
  EXPECT_NE(quant_group(Granularity::thread, OperandRole::key, 2, 64),
            quant_group(Granularity::thread, OperandRole::key, 66, 64));
  // Per warp: 16-row query slabs; keys fall back to their block.
  EXPECT_EQ(quant_group(Granularity::warp, OperandRole::query, 0, 128),
            quant_group(Granularity::warp, OperandRole::query, 15, 128));
  EXPECT_NE(quant_group(Granularity::warp, OperandRole::query, 15, 128),
            quant_group(Granularity::warp, OperandRole::query, 16, 128));
  EXPECT_EQ(quant_group(Granularity::warp, OperandRole::key, 0, 64),
            quant_group(Granularity::warp, OperandRole::key, 63, 64));
  EXPECT_EQ(quant_group(Granularity::tensor, OperandRole::key, 0, 64),
            quant_group(Granularity::tensor, OperandRole::key, 1000, 64));
  EXPECT_NE(quant_group(Granularity::token, OperandRole::key, 5, 64),
            quant_group(Granularity::token, OperandRole::key, 6, 64));
  EXPECT_EQ(parse_granularity("warp"), Granularity::warp);
  test::expect_error([] { parse_granularity("lane"); }, "granularity 'lane'");
}

TEST(Quantize, Int8PerTokenByHand) {
  // Row 0: max 2 -> delta 2/127; 1 / delta = 63.5 rounds to even 64, 0.5 / delta = 31.75 -> 32.
  // Row 1: all zeros -> scale 0 and zeros (no division by zero).
  std::vector<float> a = {1.0f, -2.0f, 0.5f, 0.0f, 0.0f, 0.0f};
  const std::vector<double> scale = quantize_rows(a, 2, 3, Format::int8(), Granularity::token, OperandRole::query, 16);
  EXPECT_DOUBLE_EQ(scale[0], 2.0 / 127.0);
  EXPECT_EQ(scale[1], 0.0);
  EXPECT_EQ(a, (std::vector<float>{64, -127, 32, 0, 0, 0}));
}

TEST(Quantize, Int4PerTensorSaturatesAndRoundsToEven) {
  // One group: max 7 -> delta 1: values round to nearest even integer within [-7, 7].
  std::vector<float> a = {2.5f, 3.5f, -7.0f, 0.4f};
  const std::vector<double> scale = quantize_rows(a, 4, 1, Format::int4(), Granularity::tensor, OperandRole::key, 64);
  for (double s : scale) EXPECT_EQ(s, 1.0);
  EXPECT_EQ(a, (std::vector<float>{2, 4, -7, 0}));
}

TEST(Quantize, Fp8PerChannel) {
  // Column 0: max 448 -> scale 1, e4m3 rounds 17 to 16 (ulp 2 in [16, 32), tie to even);
  // column 1: constant 3 -> scale 3/448, every value 448.
  std::vector<float> a = {448.0f, 3.0f, 17.0f, 3.0f};
  const std::vector<double> scale = quantize_columns(a, 2, 2, Format::e4m3());
  EXPECT_EQ(scale[0], 1.0);
  EXPECT_DOUBLE_EQ(scale[1], 3.0 / 448.0);
  EXPECT_EQ(a, (std::vector<float>{448, 448, 16, 448}));
}

// Bad operands are errors before anything is read or written: a vector shorter than rows x cols was
// read and written past its end, and a block size of 0 divided by zero (SIGFPE).
TEST(Quantize, BadOperandsAreRefused) {
  std::vector<float> four(4, 1.0f);
  test::expect_error([&] { quantize_rows(four, 4, 4, Format::int8(), Granularity::token, OperandRole::query, 16); },
                     "quantize: 4 values do not fill [rows, cols] = [4, 4]");
  test::expect_error([&] { quantize_columns(four, 4, 4, Format::int8()); }, "quantize: 4 values do not fill");
  test::expect_error([&] { quantize_columns(four, -2, -2, Format::int8()); }, "[rows, cols] = [-2, -2]");
  test::expect_error([] { quant_group(Granularity::block, OperandRole::key, 5, 0); }, "block size must be at least 1");
  test::expect_error([] { quant_group(Granularity::token, OperandRole::key, -5, 64); }, "quantize: row -5 is negative");
  test::expect_error([] { quant_group(static_cast<Granularity>(99), OperandRole::key, 5, 64); },
                     "granularity 99 is not one of Granularity's values");
  Format int1 = Format::int8();
  int1.int_bits = 1;
  test::expect_error([&] { quantize_columns(four, 2, 2, int1); }, "quantize: format: integer format of 1 bits");
  EXPECT_EQ(four, std::vector<float>(4, 1.0f));
  // A value that is not finite has no scale: refused, naming it, with nothing changed (an infinity
  // gave an infinite scale and NaN codes; a NaN was passed over by the maximum).
  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    std::vector<float> row{bad, 1.0f, 2.0f, 3.0f};
    const std::vector<float> before = row;
    test::expect_error([&] { quantize_rows(row, 1, 4, Format::int8(), Granularity::token, OperandRole::key, 16); },
                       "quantize: the value at [0, 0] is not finite");
    test::expect_error([&] { quantize_columns(row, 2, 2, Format::int8()); }, "the value at [0, 0] is not finite");
    EXPECT_EQ(std::memcmp(row.data(), before.data(), sizeof(float) * 4), 0);
  }
}

TEST(Metrics, HandCheckedValues) {
  const ErrorMetrics m = compare({1.0, 2.0, 2.0}, {1.0, 2.0, 3.0});
  EXPECT_NEAR(m.rel_rmse, 1.0 / std::sqrt(14.0), 1e-15);
  EXPECT_NEAR(m.rel_l1, 1.0 / 6.0, 1e-15);
  EXPECT_NEAR(m.rmse, std::sqrt(1.0 / 3.0), 1e-15);
  EXPECT_NEAR(m.cos_sim, 11.0 / std::sqrt(9.0 * 14.0), 1e-15);
  EXPECT_EQ(m.max_abs, 1.0);
  EXPECT_EQ(m.nan_share, 0.0);
  const ErrorMetrics bad = compare({std::nan(""), 1.0}, {1.0, 1.0});
  EXPECT_EQ(bad.nan_share, 0.5);
  EXPECT_TRUE(std::isnan(bad.rel_rmse));
}

// The measures of {3, 1} against {2, 1} with the values multiplied by `unit`: the ratios do not change
// and rmse, max_abs scale with it. Near 1e-200 the squares underflowed (rel_rmse 0, cos_sim 1), near
// 1e200 they overflowed (NaN, inf).
TEST(Metrics, MeasuresHoldAtAnyMagnitude) {
  for (const double unit : {1.0, 1e-200, 1e200, 1e-310}) {
    SCOPED_TRACE(unit);
    const ErrorMetrics m = compare({3 * unit, 1 * unit}, {2 * unit, 1 * unit});
    EXPECT_NEAR(m.rel_rmse, 1 / std::sqrt(5.0), 1e-12);
    EXPECT_NEAR(m.cos_sim, 7 / std::sqrt(50.0), 1e-12);
    EXPECT_NEAR(m.rel_l1, 1 / 3.0, 1e-12);
    EXPECT_NEAR(m.rmse / unit, std::sqrt(0.5), 1e-12);
    EXPECT_NEAR(m.max_abs / unit, 1.0, 1e-12);
  }
}

// A reference that is not finite has no error to measure against: a NaN or an inf in it is an error
// naming its index, not a finite max_abs and a nan_share of 0 beside NaN relative errors.
TEST(Metrics, ANonFiniteReferenceIsAnError) {
  const double inf = std::numeric_limits<double>::infinity();
  test::expect_error([&] { compare({1.0, 2.0, 3.0}, {1.0, std::nan(""), 3.0}); },
                     "compare: the reference holds nan at index 1 of 3");
  test::expect_error([&] { compare({1.0, 2.0, 3.0}, {1.0, 2.0, -inf}); },
                     "compare: the reference holds -inf at index 2 of 3");
}

}  // namespace
}  // namespace pasa
