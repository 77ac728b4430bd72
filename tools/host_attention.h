// SPDX-License-Identifier: Apache-2.0
// Attention on host tensors as the CLI's studies need it: fp32 outputs returned as doubles.
#pragma once

#include <optional>
#include <vector>

#include "pasa/attention.h"
#include "pasa/generators.h"

namespace pasa::cli {

// The options of a call that change its result, beside the policy (default: non-causal, 1 / sqrt(D)).
struct CallOptions {
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::bottom_right;
  std::optional<double> scale;
};

// O of pasa::attention under `policy`, [B, H, S_q, D] in C order.
std::vector<double> attention_output(QKV& data, const Policy& policy, AttentionStats* stats = nullptr,
                                     const CallOptions& call = {});

// O of the fp64 reference on the same inputs.
std::vector<double> reference_output(QKV& data, const CallOptions& call = {});

}  // namespace pasa::cli
