// SPDX-License-Identifier: Apache-2.0
// The fast tests' seeded checks swept over many seeds (CTest label "slow"). PASA_SEED_SWEEP sets how
// many (default 20, what CI runs; 1000 for a full sweep; the same variable sizes PASA's non-finite
// sweep in test_pasa.cpp); every failure names its seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mask_checks.h"
#include "pasa_average_checks.h"
#include "quant_checks.h"

namespace pasa {
namespace {

std::uint64_t sweep_seeds() {
  const char* text = std::getenv("PASA_SEED_SWEEP");
  return text != nullptr ? std::stoull(text) : 20;
}

TEST(SeedSweep, MaskOracle) {
  for (std::uint64_t seed = 1; seed <= sweep_seeds(); ++seed) {
    test::check_mask_shapes(seed, test::MaskCheck::visible_sets);
    test::check_mask_shapes(seed, test::MaskCheck::values);
  }
}

TEST(SeedSweep, SmoothingAndQuantization) {
  const std::vector<std::string> policies = test::front_end_policies();
  for (std::uint64_t seed = 1; seed <= sweep_seeds(); ++seed) {
    for (const std::string& policy : policies) test::check_front_end(seed, policy);
    test::check_p_scale(seed);
  }
}

TEST(SeedSweep, PasaAverage) {
  for (std::uint64_t seed = 1; seed <= sweep_seeds(); ++seed) {
    test::check_block_means(seed, test::BlockMeans::low_tail);
    test::check_block_means(seed, test::BlockMeans::high_all);
  }
}

}  // namespace
}  // namespace pasa
