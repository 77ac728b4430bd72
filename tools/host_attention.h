// SPDX-License-Identifier: Apache-2.0
// Attention on host tensors as the CLI's studies need it: fp32 outputs returned as doubles.
#pragma once

#include <vector>

#include "pasa/attention.h"
#include "pasa/generators.h"

namespace pasa::cli {

// O of pasa::attention under `policy` (non-causal, default scale), [B, H, S_q, D] in C order.
std::vector<double> attention_output(QKV& data, const Policy& policy, AttentionStats* stats = nullptr);

// O of the fp64 reference on the same inputs.
std::vector<double> reference_output(QKV& data);

}  // namespace pasa::cli
