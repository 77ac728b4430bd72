// SPDX-License-Identifier: Apache-2.0
// Each SageAttention2 mechanism on an input where it matters, against a model of the mechanism
// written in the tests (quant_checks.h): turning it off, or doing it with other groups, fails here.
// docs/numerics.md ("Tests that catch wrong algorithms") lists the deliberate changes these catch.
#include <gtest/gtest.h>

#include "quant_checks.h"
#include "test_util.h"

namespace pasa {
namespace {

TEST(Mechanisms, SmoothingAndQuantizationMatchTheirModelForEveryGranularity) {
  for (const std::string& policy : test::front_end_policies()) {
    for (std::uint64_t seed : test::kFixedSeeds) test::check_front_end(seed, policy);
  }
}

TEST(Mechanisms, FactorOfFp8PKeepsSmallWeightsOutOfTheSubnormals) {
  for (std::uint64_t seed : test::kFixedSeeds) test::check_p_scale(seed);
}

}  // namespace
}  // namespace pasa
