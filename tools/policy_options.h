// SPDX-License-Identifier: Apache-2.0
// Options that name a policy, or stand for a policy's fields outside a policy (the key block size of
// `pasa beta` and `pasa inspect`, inspect's beta): checked by the policy's own parser and validation,
// so their ranges are the policy's and cannot drift from it. A value they refuse is a usage error.
#pragma once

#include <string>

#include "pasa/policy.h"

namespace pasa::cli {

// The policy `text` given to `option`; throws UsageError naming the option and what is wrong with it.
Policy parse_policy_option(const std::string& option, const std::string& text);

// Throw UsageError naming `option` and the field's range when the value is not one the policy field
// s2 (a key block size, 1..1024) or beta (in [0, 1)) takes.
void check_block_option(const std::string& option, int block);
void check_beta_option(const std::string& option, double beta);

// The block options' range as the parser names it for a value past an int (Option::range), which never
// reaches check_block_option: s2's, as the policy's own parser names it (a test holds the two together).
inline const std::string kBlockOptionRange = "must be in 1..1024";

}  // namespace pasa::cli
