#include "pasa/plan.h"

#include <nlohmann/json.hpp>
#include <regex>

#include "io/atomic_file.h"
#include "io/byte_io.h"
#include "pasa/error.h"
#include "pasa/version.h"

namespace pasa {
namespace {

using nlohmann::json;

// The largest layer and timestep an entry name can spell (6 and 9 digits).
constexpr std::int64_t kMaxLayer = 999999;
constexpr std::int64_t kMaxTimestep = 999999999;

// "an array", "a number", ...: a JSON value's kind for a message.
std::string kind_of(const json& value) {
  const std::string name = value.type_name();
  return (name == "array" || name == "object" ? "an " : "a ") + name;
}

// An integer field in [0, max]: a JSON integer, not a float that happens to be whole.
int integer_field(const json& value, std::int64_t max, const std::string& where) {
  if (!value.is_number_integer()) {
    throw Error(where + ": " + value.dump() + " is not an integer");
  }
  if (value.is_number_unsigned() ? value.get<std::uint64_t>() > static_cast<std::uint64_t>(max)
                                 : (value.get<std::int64_t>() < 0 || value.get<std::int64_t>() > max)) {
    throw Error(where + ": " + value.dump() + " is outside 0.." + std::to_string(max));
  }
  return static_cast<int>(value.get<std::int64_t>());
}

std::string string_field(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error(where + ": missing \"" + key + "\"");
  if (!it->is_string()) throw Error(where + "." + key + ": " + kind_of(*it) + ", not a string");
  return it->get<std::string>();
}

const json& member(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error(where + ": missing \"" + key + "\"");
  return *it;
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
  static const std::regex pattern(R"(layer(\d{1,6})(?:_t(\d{1,9}))?)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) {
    throw Error("entry '" + name + "': names must be layer<L> or layer<L>_t<T> (e.g. layer3_t10)");
  }
  return {std::stoi(m[1].str()), m[2].matched ? std::stoi(m[2].str()) : -1};
}

std::string entry_name(int layer, int timestep) {
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
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(origin + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(origin + ": " + kind_of(j) + ", not a plan object");
  MixPlan plan;
  plan.fast = string_field(j, "fast", origin);
  plan.accurate = string_field(j, "accurate", origin);
  check_policy(plan.fast, origin + ": fast");
  check_policy(plan.accurate, origin + ": accurate");
  const json& xi = member(j, "xi", origin);
  if (!xi.is_number() || !(xi.get<double>() >= 0 && xi.get<double>() <= 100)) {
    throw Error(origin + ": xi: " + xi.dump() + " is not a percentage in 0..100");
  }
  plan.xi = xi.get<double>();
  const json& entries = member(j, "entries", origin);
  if (!entries.is_array()) throw Error(origin + ": entries: " + kind_of(entries) + ", not an array");
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries[i];
    const std::string where = origin + ": entries[" + std::to_string(i) + "]";
    if (!e.is_object()) throw Error(where + ": " + kind_of(e) + ", not an object");
    const int layer = integer_field(member(e, "layer", where), kMaxLayer, where + ".layer");
    const auto ts = e.find("timestep");
    const int timestep =
        ts == e.end() || ts->is_null() ? -1 : integer_field(*ts, kMaxTimestep, where + ".timestep");
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
  json j{{"pasa_version", version()}, {"fast", plan.fast}, {"accurate", plan.accurate}, {"xi", plan.xi}};
  json entries = json::array();
  for (const auto& [key, text] : plan.entries) {
    json e{{"layer", key.first}, {"policy", text}};
    e["timestep"] = key.second >= 0 ? json(key.second) : json(nullptr);
    if (auto it = scores.find(key); it != scores.end()) e["score"] = it->second;
    entries.push_back(e);
  }
  j["entries"] = entries;
  io::detail::write_text_atomically(path, j.dump(1) + "\n");
}

}  // namespace pasa
