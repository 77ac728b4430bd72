// SPDX-License-Identifier: Apache-2.0
// Options that stand for a policy's fields outside a policy (the key block size of `pasa beta` and
// `pasa inspect`, inspect's beta): checked by the policy's own validation, so their ranges are the
// policy's and cannot drift from it.
#pragma once

#include <string>

namespace pasa::cli {

// Throw pasa::Error naming `option` and the field's range when the value is not one the policy field
// s2 (a key block size, 1..1024) or beta (in [0, 1)) takes.
void check_block_option(const std::string& option, int block);
void check_beta_option(const std::string& option, double beta);

}  // namespace pasa::cli
