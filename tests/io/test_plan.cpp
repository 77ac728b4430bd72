// SPDX-License-Identifier: Apache-2.0
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
  for (const char* name : {"layer3", "layer12_t40", "layer0_t0", "layer999999_t999999999"}) {
    const auto [layer, timestep] = parse_entry_name(name);
    EXPECT_EQ(entry_name(layer, timestep), name);
  }
  // A name of the right form with a number out of range says which number and its range.
  test::expect_error([] { parse_entry_name("layer1000000"); }, "layer 1000000 is outside 0..999999");
  test::expect_error([] { parse_entry_name("layer0_t1000000000"); }, "timestep 1000000000 is outside 0..999999999");
  test::expect_error([] { parse_entry_name("layer99999999999999999999"); }, "is outside 0..999999");
  // entry_name refuses what parse_entry_name could not read back.
  test::expect_error([] { entry_name(-3, -7); }, "layer -3 must be in 0..999999");
  test::expect_error([] { entry_name(1, -2); }, "timestep -2 in 0..999999999");
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

// save_plan refuses a plan load_plan would refuse, before writing: such plans were written and then
// unreadable, and a timestep below -1 was written as null and read back as another entry.
TEST(Plan, SaveRefusesAPlanItsReaderWouldRefuse) {
  const std::string path = temp_path("unsaved");
  test::expect_error([&] { save_plan(path, MixPlan{"sage4", "sage8", 30, {{{1, -1}, "sage9"}}}, {}); },
                     path + ": entries[0].policy: unknown policy 'sage9'");
  test::expect_error([&] { save_plan(path, MixPlan{"sage4", "sage8", 101, {}}, {}); }, path + ": xi: 101");
  test::expect_error([&] { save_plan(path, MixPlan{"sage4", "sage8", 30, {{{-3, -1}, "sage8"}}}, {}); },
                     path + ": entries[0].layer: -3 is outside 0..999999");
  test::expect_error([&] { save_plan(path, MixPlan{"sage4", "sage8", 30, {{{1, -7}, "sage8"}}}, {}); },
                     path + ": entry layer1: timestep -7 is neither -1");
  test::expect_error([&] { save_plan(path, MixPlan{"sage4", "sage8", 30, {{{1, -1}, "exa\xc3"}}}, {}); },
                     path + ": string is not valid UTF-8");  // (a pasa::Error, as every refusal)
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Plan, BadFiles) {
  const std::string path = temp_path("badplan");
  test::expect_error([&] { load_plan(path); }, "cannot open");
  std::ofstream(path) << "{not json";
  test::expect_error([&] { load_plan(path); }, "not valid JSON");
  std::ofstream(path) << R"({"fast": "sage4"})";
  test::expect_error([&] { load_plan(path); }, path + ": missing \"accurate\"");
  std::ofstream(path) << R"({"fast": "sage9", "accurate": "sage8", "xi": 1, "entries": []})";
  test::expect_error([&] { load_plan(path); }, path + ": fast: unknown policy 'sage9'");
  std::filesystem::remove(path);
}

TEST(Plan, APathWithANulIsRefused) {
  const std::string cut = temp_path("plan");  // what the system calls would see
  const std::string path = cut + std::string("\0.json", 6);
  const MixPlan plan{"sage4", "sage8", 30, {}};
  test::expect_error([&] { save_plan(path, plan, {}); }, "output path '");
  test::expect_error([&] { save_plan(path, plan, {}); }, "contains a NUL character");
  test::expect_error([&] { load_plan(path); }, "input path '");
  EXPECT_FALSE(std::filesystem::exists(cut));
}

// Every field is checked as written: no coercion of floats or out-of-range integers, xi within its
// documented 0..100, each (layer, timestep) once, and each error names the source and the field.
TEST(Plan, StrictFields) {
  const auto plan_with = [](const std::string& xi, const std::string& entries) {
    return R"({"fast": "sage4", "accurate": "sage8", "xi": )" + xi + R"(, "entries": [)" + entries + "]}";
  };
  const auto entry = [](const std::string& layer, const std::string& timestep = "null",
                        const std::string& policy = "\"sage8\"") {
    return R"({"layer": )" + layer + R"(, "timestep": )" + timestep + R"(, "policy": )" + policy + "}";
  };
  const MixPlan ok = parse_plan(plan_with("30", entry("0") + ", " + entry("999999", "999999999")), "p.json");
  EXPECT_EQ(ok.entries.size(), 2u);
  EXPECT_EQ(ok.entries.count({999999, 999999999}), 1u);

  const std::pair<std::string, std::string> cases[] = {
      {plan_with("30", entry("1.7")), "p.json: entries[0].layer: 1.7 is not an integer"},
      {plan_with("30", entry("1e20")), "p.json: entries[0].layer: 1e+20 is not an integer"},
      {plan_with("30", entry("1099511627776")), "entries[0].layer: 1099511627776 is outside 0..999999"},
      {plan_with("30", entry("-1")), "entries[0].layer: -1 is outside 0..999999"},
      {plan_with("30", entry("\"3\"")), "entries[0].layer: \"3\" is not an integer"},
      {plan_with("30", entry("2", "2.5")), "entries[0].timestep: 2.5 is not an integer"},
      {plan_with("30", entry("2", "1000000000")), "entries[0].timestep: 1000000000 is outside"},
      {plan_with("500", ""), "p.json: xi: 500 is not a percentage in 0..100"},
      {plan_with("-1", ""), "p.json: xi: -1 is not a percentage"},
      {plan_with("\"30\"", ""), "p.json: xi: \"30\" is not a percentage"},
      {plan_with("30", entry("1") + ", " + entry("1")), "entries[1]: a second entry for layer 1 (any timestep)"},
      {plan_with("30", entry("1", "4") + ", " + entry("1", "4")), "entries[1]: a second entry for layer 1 timestep 4"},
      {plan_with("30", entry("1", "null", "\"sage9\"")), "p.json: entries[0].policy: unknown policy 'sage9'"},
      {plan_with("30", entry("1", "null", "7")), "p.json: entries[0].policy: a number, not a string"},
      {plan_with("30", "3"), "p.json: entries[0]: a number, not an object"},
      // (read strictly: a misspelled key, an entry without its timestep, a key the plan has not)
      {plan_with("30", R"({"layer": 2, "timstep": 9, "policy": "exact"})"),
       "p.json: entries[0]: unknown key 'timstep' (a plan's keys: layer, timestep, policy, score)"},
      {plan_with("30", R"({"layer": 2, "policy": "exact"})"), "p.json: entries[0]: missing \"timestep\""},
      {R"({"fast": "sage4", "accurate": "sage8", "xi": 30, "entries": [], "default": "exact"})",
       "p.json: unknown key 'default' (a plan's keys: pasa_version, fast, accurate, xi, entries)"},
      {"[1, 2]", "p.json: an array, not a plan object"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    test::expect_error([&] { parse_plan(text, "p.json"); }, message);
  }
}

}  // namespace
}  // namespace pasa
