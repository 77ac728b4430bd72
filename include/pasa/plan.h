// SPDX-License-Identifier: Apache-2.0
// pasa/plan.h — adaptive mixing (SageAttn-mix): which policy each (layer, timestep) uses, as written
// by `pasa calibrate` and loaded by the C++ API and the Python package.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "pasa/policy.h"

namespace pasa {

struct MixPlan {
  std::string fast, accurate;  // policy texts
  double xi = 0;               // percent of entries sent to the accurate policy
  // (layer, timestep or -1 for "any timestep") -> policy text
  std::map<std::pair<int, int>, std::string> entries;

  // The policy for a call: the entry for (layer, timestep), else the layer's timestep-free entry,
  // else the fast policy.
  Policy policy_for(int layer, std::optional<int> timestep = std::nullopt) const;
};

// Entry names are "layer<L>" or "layer<L>_t<T>" (what `pasa.capture` writes), L in 0..999999 and T in
// 0..999999999. Throws pasa::Error naming the name otherwise (its form, or the number out of range).
std::pair<int, int> parse_entry_name(const std::string& name);
// The inverse: "layer<L>", or "layer<L>_t<T>" for T >= 0 (T = -1: none). Throws pasa::Error for a
// layer or timestep outside those ranges, whose name could not be read back.
std::string entry_name(int layer, int timestep);

// Plans are untrusted input, checked strictly: fast, accurate and every entry's policy must parse, xi
// lie in 0..100, layer (0..999999) and timestep (0..999999999, or null) be JSON integers, and no
// (layer, timestep) appear twice. Errors are pasa::Error naming the file (`origin`) and the field,
// e.g. "plan.json: entries[2].layer: 1.7 is not an integer".
MixPlan parse_plan(const std::string& json_text, const std::string& origin);
MixPlan load_plan(const std::string& path);
// Throws pasa::Error naming `path`, before writing, for a plan load_plan would refuse (and a timestep
// below -1, which the file cannot spell).
void save_plan(const std::string& path, const MixPlan& plan,
               const std::map<std::pair<int, int>, double>& scores);

}  // namespace pasa
