// SPDX-License-Identifier: Apache-2.0
#include "pasa/plan.h"

#include <algorithm>
#include <initializer_list>
#include <regex>

#include "io/atomic_file.h"
#include "io/byte_io.h"
#include "io/json_fields.h"
#include "pasa/error.h"
#include "text/json.h"
#include "pasa/version.h"

namespace pasa {
namespace {

using text::Json;
using io::detail::kind_of;
using io::detail::member;
using io::detail::string_field;

// The largest layer and timestep an entry name can spell (6 and 9 digits).
constexpr std::int64_t kMaxLayer = 999999;
constexpr std::int64_t kMaxTimestep = 999999999;

// An integer field in [0, max]: a JSON integer, not a float that happens to be whole.
int integer_field(const Json& value, std::int64_t max, const std::string& where) {
  if (!value.is_integer()) {
    throw Error(where + ": " + value.dump() + " is not an integer");
  }
  if (value.as_double() < 0 || value.as_uint64() > static_cast<std::uint64_t>(max)) {
    throw Error(where + ": " + value.dump() + " is outside 0.." + std::to_string(max));
  }
  return static_cast<int>(value.as_int64());
}

// A plan is read strictly: a key it does not know (a misspelled "timstep", a "default" added by hand)
// would otherwise change nothing without a word.
void check_keys(const Json& object, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& field : object.as_object()) {
    const std::string& key = field.first;  // (not a structured binding: clang before 16 cannot capture one)
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      std::string names;
      for (const char* k : known) names += std::string(names.empty() ? "" : ", ") + k;
      throw Error(where + ": unknown key '" + key + "' (a plan's keys: " + names + ")");
    }
  }
}

// A policy field checked now, naming the file and the field, rather than at the first call.
void check_policy(const std::string& text, const std::string& where) {
  try {
    parse_policy(text);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

}  // namespace

std::pair<int, int> parse_entry_name(const std::string& name) {
  static const std::regex pattern(R"(layer(\d+)(?:_t(\d+))?)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) {
    throw Error("entry '" + name + "': names must be layer<L> or layer<L>_t<T> (e.g. layer3_t10)");
  }
  // (the numbers' ranges apart from the form, so that a name of the right form out of range says so)
  const auto number = [&](const std::string& digits, std::int64_t max, const char* what) {
    if (digits.size() > 9 || std::stoll(digits) > max) {
      throw Error("entry '" + name + "': " + what + " " + digits + " is outside 0.." + std::to_string(max));
    }
    return std::stoi(digits);
  };
  return {number(m[1].str(), kMaxLayer, "layer"), m[2].matched ? number(m[2].str(), kMaxTimestep, "timestep") : -1};
}

std::string entry_name(int layer, int timestep) {
  if (layer < 0 || layer > kMaxLayer || timestep < -1 || timestep > kMaxTimestep) {
    throw Error("entry name: layer " + std::to_string(layer) + " must be in 0.." + std::to_string(kMaxLayer) +
                " and timestep " + std::to_string(timestep) + " in 0.." + std::to_string(kMaxTimestep) +
                " (or -1: none)");
  }
  return "layer" + std::to_string(layer) + (timestep >= 0 ? "_t" + std::to_string(timestep) : "");
}

Policy MixPlan::policy_for(int layer, std::optional<int> timestep) const {
  if (timestep) {
    if (auto it = entries.find({layer, *timestep}); it != entries.end()) return parse_policy(it->second);
  }
  if (auto it = entries.find({layer, -1}); it != entries.end()) return parse_policy(it->second);
  return parse_policy(fast);
}

MixPlan parse_plan(const std::string& json_text, const std::string& origin) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const text::JsonError& e) {
    throw Error(origin + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(origin + ": " + kind_of(j) + ", not a plan object");
  check_keys(j, {"pasa_version", "fast", "accurate", "xi", "entries"}, origin);
  MixPlan plan;
  plan.fast = string_field(j, "fast", origin);
  plan.accurate = string_field(j, "accurate", origin);
  check_policy(plan.fast, origin + ": fast");
  check_policy(plan.accurate, origin + ": accurate");
  const Json& xi = member(j, "xi", origin);
  if (!xi.is_number() || !(xi.as_double() >= 0 && xi.as_double() <= 100)) {
    throw Error(origin + ": xi: " + xi.dump() + " is not a percentage in 0..100");
  }
  plan.xi = xi.as_double();
  const Json& entries = member(j, "entries", origin);
  if (!entries.is_array()) throw Error(origin + ": entries: " + kind_of(entries) + ", not an array");
  for (std::size_t i = 0; i < entries.as_array().size(); ++i) {
    const Json& e = entries.as_array()[i];
    const std::string where = origin + ": entries[" + std::to_string(i) + "]";
    if (!e.is_object()) throw Error(where + ": " + kind_of(e) + ", not an object");
    check_keys(e, {"layer", "timestep", "policy", "score"}, where);
    const int layer = integer_field(member(e, "layer", where), kMaxLayer, where + ".layer");
    const Json& ts = member(e, "timestep", where);  // (null: any timestep)
    const int timestep = ts.is_null() ? -1 : integer_field(ts, kMaxTimestep, where + ".timestep");
    const std::string policy = string_field(e, "policy", where);
    check_policy(policy, where + ".policy");
    if (!plan.entries.emplace(std::pair{layer, timestep}, policy).second) {
      throw Error(where + ": a second entry for layer " + std::to_string(layer) +
                  (timestep >= 0 ? " timestep " + std::to_string(timestep) : std::string(" (any timestep)")));
    }
  }
  return plan;
}

MixPlan load_plan(const std::string& path) {
  const io::detail::InputFile file(path);
  const std::vector<std::uint8_t> bytes = file.read(0, file.size());
  return parse_plan(std::string(bytes.begin(), bytes.end()), path);
}

void save_plan(const std::string& path, const MixPlan& plan, const std::map<std::pair<int, int>, double>& scores) {
  Json j = Json::object({{"pasa_version", version()}, {"fast", plan.fast}, {"accurate", plan.accurate}, {"xi", plan.xi}});
  Json entries = Json::array();
  for (const auto& [key, text] : plan.entries) {
    if (key.second < -1) {  // null would read back as -1, another entry
      throw Error(path + ": entry " + entry_name(key.first, -1) + ": timestep " + std::to_string(key.second) +
                  " is neither -1 (any timestep) nor in 0.." + std::to_string(kMaxTimestep));
    }
    Json e = Json::object({{"layer", key.first}, {"policy", text}});
    e["timestep"] = key.second >= 0 ? Json(key.second) : Json(nullptr);
    if (auto it = scores.find(key); it != scores.end()) e["score"] = it->second;
    entries.push_back(e);
  }
  j["entries"] = entries;
  // A plan that load_plan would refuse (a bad policy, xi or layer; text that is not UTF-8) is refused
  // before it is written.
  std::string text;
  try {
    text = j.dump(1) + "\n";
  } catch (const text::JsonError& e) {
    throw Error(path + ": " + e.what());
  }
  parse_plan(text, path);
  io::detail::write_text_atomically(path, text);
}

}  // namespace pasa
