#include "pasa/plan.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "pasa/error.h"

namespace pasa {

std::pair<int, int> parse_entry_name(const std::string& name) {
  static const std::regex pattern(R"(layer(\d{1,6})(?:_t(\d{1,9}))?)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) {
    throw Error("entry '" + name + "': names must be layer<L> or layer<L>_t<T> (e.g. layer3_t10)");
  }
  return {std::stoi(m[1].str()), m[2].matched ? std::stoi(m[2].str()) : -1};
}

Policy MixPlan::policy_for(int layer, std::optional<int> timestep) const {
  if (timestep) {
    if (auto it = entries.find({layer, *timestep}); it != entries.end()) return parse_policy(it->second);
  }
  if (auto it = entries.find({layer, -1}); it != entries.end()) return parse_policy(it->second);
  return parse_policy(fast);
}

MixPlan load_plan(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open the plan");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  MixPlan plan;
  try {
    plan.fast = j.at("fast").get<std::string>();
    plan.accurate = j.at("accurate").get<std::string>();
    plan.xi = j.at("xi").get<double>();
    for (const auto& e : j.at("entries")) {
      const int layer = e.at("layer").get<int>();
      const int timestep = e.contains("timestep") && !e["timestep"].is_null() ? e["timestep"].get<int>() : -1;
      plan.entries[{layer, timestep}] = e.at("policy").get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a pasa plan (" + e.what() + ")");
  }
  parse_policy(plan.fast);  // fail now, naming the field, rather than at the first call
  parse_policy(plan.accurate);
  for (const auto& [key, text] : plan.entries) parse_policy(text);
  return plan;
}

void save_plan(const std::string& path, const MixPlan& plan, const std::map<std::pair<int, int>, double>& scores) {
  nlohmann::json j{{"fast", plan.fast}, {"accurate", plan.accurate}, {"xi", plan.xi}};
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [key, text] : plan.entries) {
    nlohmann::json e{{"layer", key.first}, {"policy", text}};
    e["timestep"] = key.second >= 0 ? nlohmann::json(key.second) : nlohmann::json(nullptr);
    if (auto it = scores.find(key); it != scores.end()) e["score"] = it->second;
    entries.push_back(e);
  }
  j["entries"] = entries;
  std::ofstream f(path);
  f << j.dump(1) << "\n";
  if (!f) throw Error(path + ": cannot write the plan");
}

}  // namespace pasa
