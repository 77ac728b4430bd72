// SPDX-License-Identifier: Apache-2.0
// The generators' random numbers are the project's own algorithm (src/data/random.h), so a seed gives
// the same tensors on every platform. The pinned values below were computed by an independent
// implementation of that documented algorithm (Python integers for xoshiro256** and splitmix64,
// Python's math.log/sqrt/cos/sin for Box-Muller); a change to the algorithm, the draw order of a
// generator, or a standard-library distribution sneaking back in makes them fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <numeric>
#include <vector>

#include "data/random.h"
#include "pasa/error.h"
#include "pasa/generators.h"

namespace pasa {
namespace {

TEST(Rng, RawOutputsArePinned) {
  // (The Python check also reproduced splitmix64's published first output from state 0,
  // 0xe220a8397b1dcdaf, before computing these.)
  Rng rng(2024);
  EXPECT_EQ(rng.next_u64(), 0x0e48715a13d7772eULL);
  EXPECT_EQ(rng.next_u64(), 0xc837f3ee8a7a1065ULL);
  EXPECT_EQ(rng.next_u64(), 0x1272314b15ee5001ULL);
}

TEST(Rng, UniformAndNormalArePinned) {
  Rng u(2024);
  EXPECT_EQ(u.uniform(), 0.055792889110163335);  // exact: 53 bits times 2^-53
  EXPECT_EQ(u.uniform(), 0.782103772866755);
  // Box-Muller goes through the C library's log, cos and sin (within an ulp of the true value).
  Rng n(2024);
  for (double expected : {0.06788824651552398, -0.3319799173568374, 0.20780665233422843, 0.32616237742988885}) {
    EXPECT_NEAR(n.normal(), expected, 4e-16) << "seed 2024";
  }
}

TEST(Rng, IndexStaysBelowNAndShuffleIsAPermutation) {
  Rng rng(11);
  for (std::uint64_t n : {1ULL, 2ULL, 3ULL, 1000ULL}) {
    for (int i = 0; i < 1000; ++i) ASSERT_LT(rng.index(n), n) << "seed 11, n " << n;
  }
  std::vector<int> items(64);
  std::iota(items.begin(), items.end(), 0);
  rng.shuffle(items.data(), items.size());
  std::vector<int> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(items, sorted) << "seed 11: a shuffle of 64 items left them in order";
}

TEST(Generators, SeededTensorsArePinned) {
  // fp32 so the values are the doubles rounded once; the first four elements of Q.
  const Shape4 shape{1, 1, 2, 4};
  const std::vector<float> hybrid = to_float(hybrid_qkv(shape, 1.0, 10.0, 7, DType::f32, 0.5).q);
  const std::vector<float> hybrid_expected = {0.7209759950637817f, 2.5277230739593506f, -18.832870483398438f,
                                              3.285189390182495f};
  const std::vector<float> uniform = to_float(uniform_qkv(shape, 0.0, 1.0, 7, DType::f32).q);
  const std::vector<float> uniform_expected = {0.40115296840667725f, -0.4424975514411926f, 0.679254949092865f};
  for (std::size_t i = 0; i < hybrid_expected.size(); ++i) EXPECT_EQ(hybrid[i], hybrid_expected[i]) << i;
  for (std::size_t i = 0; i < uniform_expected.size(); ++i) EXPECT_EQ(uniform[i], uniform_expected[i]) << i;
}

// Parameters that draw values no attention call accepts are refused by the generator: a NaN or
// infinite parameter, or an amplitude beyond the dtype's range, once gave tensors of NaN or inf.
TEST(Generators, NonFiniteDrawsAreRefused) {
  const Shape4 shape{1, 1, 4, 8};
  const auto refused = [](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused([&] { uniform_qkv(shape, std::nan(""), 1.0, 1); }, "generator: drew nan, which is not finite in f16");
  refused([&] { uniform_qkv(shape, 0.0, 1e6, 1); }, "which is not finite in f16");
  refused([&] { hybrid_qkv(shape, std::numeric_limits<double>::infinity(), 1.0, 1, DType::f32); }, "not finite in f32");
  refused([&] { outlier_qkv(shape, 2, std::nan(""), 1); }, "not finite in f16");
  ResonanceParams nan_amp;
  nan_amp.k_amp = std::nan("");
  refused([&] { resonance_qkv(shape, nan_amp, 1); }, "not finite in f16");
  ResonanceParams always;
  always.in_phase = 2.0;
  refused([&] { resonance_qkv(shape, always, 1); }, "resonance: in_phase must be in [0, 1]");
  refused([&] { uniform_qkv(shape, 0.0, 1.0, 1, static_cast<DType>(9)); }, "generator: unsupported dtype (code 9)");
  // The same amplitude fits f32.
  EXPECT_NO_THROW(uniform_qkv(shape, 0.0, 1e6, 1, DType::f32));
}

}  // namespace
}  // namespace pasa
