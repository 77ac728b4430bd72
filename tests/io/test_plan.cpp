// Adaptive-mixing plans: names, lookup order, and files that are not plans.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "pasa/plan.h"
#include "test_util.h"

namespace pasa {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(test::fresh_seed()))).string();
}

TEST(Plan, EntryNames) {
  EXPECT_EQ(parse_entry_name("layer3"), std::make_pair(3, -1));
  EXPECT_EQ(parse_entry_name("layer12_t40"), std::make_pair(12, 40));
  test::expect_error([] { parse_entry_name("block3"); }, "entry 'block3'");
  test::expect_error([] { parse_entry_name("layer3_x"); }, "layer<L>_t<T>");
}

TEST(Plan, RoundTripAndLookup) {
  MixPlan plan{"sage4", "sage8", 30, {{{1, 5}, "sage8"}, {{1, -1}, "sage4"}, {{2, -1}, "sage8"}}};
  const std::string path = temp_path("plan");
  save_plan(path, plan, {{{1, 5}, 0.9}});
  const MixPlan back = load_plan(path);
  EXPECT_EQ(back.entries, plan.entries);
  EXPECT_EQ(back.xi, 30);
  EXPECT_EQ(back.policy_for(1, 5), preset_policy("sage8"));   // exact (layer, timestep)
  EXPECT_EQ(back.policy_for(1, 6), preset_policy("sage4"));   // the layer's timestep-free entry
  EXPECT_EQ(back.policy_for(2), preset_policy("sage8"));
  EXPECT_EQ(back.policy_for(9, 1), preset_policy("sage4"));   // unknown layer: the fast policy
  std::filesystem::remove(path);
}

TEST(Plan, BadFiles) {
  const std::string path = temp_path("badplan");
  test::expect_error([&] { load_plan(path); }, "cannot open");
  std::ofstream(path) << "{not json";
  test::expect_error([&] { load_plan(path); }, "not valid JSON");
  std::ofstream(path) << R"({"fast": "sage4"})";
  test::expect_error([&] { load_plan(path); }, "not a pasa plan");
  std::ofstream(path) << R"({"fast": "sage9", "accurate": "sage8", "xi": 1, "entries": []})";
  test::expect_error([&] { load_plan(path); }, "unknown policy 'sage9'");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace pasa
