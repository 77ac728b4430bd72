// SPDX-License-Identifier: Apache-2.0
// The emulator's GEMM model with a narrow accumulator: product by product (mma_k = 0), or in steps
// summed as Hopper's tensor cores sum them (aligned to the largest exponent, cut 25 bits below it,
// one rounding a step). Hand-made cases whose answers differ between the readings; the GPU test
// tests/cuda/test_mma_step.cu checks the model against wgmma itself.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/gemm_model.h"
#include "pasa/format.h"

namespace pasa {
namespace {

// One output: c + sum a_t b_t in an fp16 accumulator of the given step (0: product by product).
double fp16_dot(double c, const std::vector<float>& a, const std::vector<float>& b, int step) {
  const Rounder fp16(Format::fp16());
  double out = c;
  model_gemm(a.data(), static_cast<std::int64_t>(a.size()), b.data(), 1, 1, static_cast<int>(a.size()), 1, fp16, step,
             fp16, &out, 1, true);
  return out;
}

TEST(GemmModel, AStepRoundsOnceWhereProductByProductLosesEveryTerm) {
  // 1 + 16 x 2^-12: each product alone is below half of fp16's ulp at 1 (2^-11), so one at a time it
  // rounds away; a step of 16 adds 2^-8, which fp16 holds.
  const std::vector<float> a(16, std::ldexp(1.0f, -6)), b(16, std::ldexp(1.0f, -6));
  EXPECT_EQ(fp16_dot(1.0, a, b, 0), 1.0);
  EXPECT_EQ(fp16_dot(1.0, a, b, 16), 1.0 + std::ldexp(1.0, -8));
  // Two steps of 8: each adds 2^-9, which fp16 holds at 1 (ulp 2^-10).
  EXPECT_EQ(fp16_dot(1.0, a, b, 8), 1.0 + std::ldexp(1.0, -8));
}

TEST(GemmModel, TermsBelowTwentyFiveBitsUnderTheLargestAreCut) {
  // 1 + 2^-11 is a tie in fp16 (rounds to even, 1); 2^-28 more would round it up, but lies below
  // 2^(0 - 25) and is cut before the sum.
  const std::vector<float> a = {std::ldexp(1.0f, -5), std::ldexp(1.0f, -14)};
  const std::vector<float> b = {std::ldexp(1.0f, -6), std::ldexp(1.0f, -14)};
  EXPECT_EQ(fp16_dot(1.0, a, b, 16), 1.0);
  // 2^-25 itself is kept: the sum passes the tie and rounds up.
  const std::vector<float> b_kept = {std::ldexp(1.0f, -6), std::ldexp(1.0f, -11)};
  EXPECT_EQ(fp16_dot(1.0, a, b_kept, 16), 1.0 + std::ldexp(1.0, -10));
}

TEST(GemmModel, AProductIsAlignedByItsOperandsExponents) {
  // 1.5 x 1.5 = 2.25 has exponent 1, but its operands' exponents sum to 0: the cut lies at 2^-25,
  // which keeps a third product of 2^-25 and takes 2.25 + 2^-10 (a tie at 2.25, whose fp16 ulp is
  // 2^-9) past the tie.
  const std::vector<float> a = {1.5f, std::ldexp(1.0f, -5), std::ldexp(1.0f, -12)};
  const std::vector<float> b = {1.5f, std::ldexp(1.0f, -5), std::ldexp(1.0f, -13)};
  EXPECT_EQ(fp16_dot(0.0, a, b, 16), 2.25 + std::ldexp(1.0, -9));
}

TEST(GemmModel, TheAccumulatorIsAlignedWithTheProducts) {
  // 2048 + 1 is a tie in fp16 (ulp 2 there: rounds to even, 2048). A product of 2^-15 would take it
  // past the tie if the products alone set the cut (at 2^(0 - 25)); the accumulator's exponent 11
  // sets it at 2^-14, so the 2^-15 is cut.
  const std::vector<float> a = {1.0f, std::ldexp(1.0f, -7)}, b = {1.0f, std::ldexp(1.0f, -8)};
  EXPECT_EQ(fp16_dot(2048.0, a, b, 16), 2048.0);
}

TEST(GemmModel, AnAccumulatorThatOverflowedStaysInfinite) {
  // (as wgmma keeps an fp16 accumulator at inf: its exponent would otherwise set an infinite cut)
  const std::vector<float> a = {1.0f, -2.0f}, b = {3.0f, 1.0f};
  EXPECT_EQ(fp16_dot(INFINITY, a, b, 16), INFINITY);
  EXPECT_EQ(fp16_dot(-INFINITY, a, b, 16), -INFINITY);
  EXPECT_TRUE(std::isnan(fp16_dot(NAN, a, b, 16)));
  const std::vector<float> with_nan = {1.0f, NAN}, with_inf = {1.0f, INFINITY};
  EXPECT_TRUE(std::isnan(fp16_dot(1.0, with_nan, b, 16)));
  EXPECT_EQ(fp16_dot(1.0, with_inf, b, 16), INFINITY);
  // A sum past fp16's largest value rounds to inf in the step, and the next step keeps it.
  const std::vector<float> big(32, 256.0f);
  EXPECT_EQ(fp16_dot(0.0, big, big, 16), INFINITY);
}

TEST(GemmModel, Fp32AndWiderAccumulatorsIgnoreTheStep) {
  const std::vector<float> a = {1.0f, std::ldexp(1.0f, -30)}, b = {1.0f, 1.0f};
  for (const Format f : {Format::fp32(), Format::floating(11, 52)}) {
    const Rounder acc(f);
    double step0 = 0.0, step16 = 0.0;
    model_gemm(a.data(), 2, b.data(), 1, 1, 2, 1, acc, 0, acc, &step0, 1);
    model_gemm(a.data(), 2, b.data(), 1, 1, 2, 1, acc, 16, acc, &step16, 1);
    EXPECT_EQ(step0, step16) << f.name();
  }
}

}  // namespace
}  // namespace pasa
