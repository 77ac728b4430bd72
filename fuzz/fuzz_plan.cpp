// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the mixing-plan reader: any byte string must either parse into a plan whose
// every policy parses, or give a pasa::Error. Any other exception, a crash, or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pasa/error.h"
#include "pasa/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const pasa::MixPlan plan =
        pasa::parse_plan(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>");
    // parse_plan promised valid policies and in-range keys: using them must not throw.
    for (const auto& [key, text] : plan.entries) {
      if (key.first < 0 || key.second < -1) __builtin_trap();
      plan.policy_for(key.first, key.second);
    }
    if (!(plan.xi >= 0 && plan.xi <= 100)) __builtin_trap();
  } catch (const pasa::Error&) {
  }
  return 0;
}
