// SPDX-License-Identifier: Apache-2.0
// The CPU backends behind pasa::attention().
#pragma once

#include "attention_checks.h"
#include "pasa/attention.h"

namespace pasa {

// The tiled online-softmax loop (FlashAttention-2 structure, PASA's shift when the policy asks),
// rounding at every point the policy names. Multithreaded over (batch, head, query block).
void emulate_attention(const AttentionArgs& args, const ProblemShape& shape);

}  // namespace pasa
