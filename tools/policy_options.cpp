// SPDX-License-Identifier: Apache-2.0
#include "policy_options.h"

#include "pasa/error.h"
#include "pasa/policy.h"

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
    throw Error(option + ": " + e.what());
  }
}

}  // namespace

void check_block_option(const std::string& option, int block) {
  check_as_field(option, [&](Policy& p) { p.block_kv = block; });
}

void check_beta_option(const std::string& option, double beta) {
  check_as_field(option, [&](Policy& p) { p.beta = beta; });
}

}  // namespace pasa::cli
