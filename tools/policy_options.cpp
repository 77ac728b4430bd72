// SPDX-License-Identifier: Apache-2.0
#include "policy_options.h"

#include "args.h"
#include "pasa/error.h"

namespace pasa::cli {
namespace {

// The pasa preset with one field changed, through validate(): its message, prefixed with the option.
template <typename Set>
void check_as_field(const std::string& option, Set set) {
  Policy policy = preset_policy("pasa");
  set(policy);
  try {
    validate(policy);
  } catch (const Error& e) {
    throw UsageError(option + ": " + e.what());
  }
}

}  // namespace

Policy parse_policy_option(const std::string& option, const std::string& text) {
  try {
    return parse_policy(text);
  } catch (const Error& e) {
    throw UsageError(option + ": " + e.what());
  }
}

void check_block_option(const std::string& option, int block) {
  check_as_field(option, [&](Policy& p) { p.block_kv = block; });
}

void check_beta_option(const std::string& option, double beta) {
  check_as_field(option, [&](Policy& p) { p.beta = beta; });
}

}  // namespace pasa::cli
