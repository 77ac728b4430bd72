// SPDX-License-Identifier: Apache-2.0
// The CPU backends behind pasa::attention().
#pragma once

#include "attention_checks.h"
#include "pasa/attention.h"

namespace pasa {

// The tiled online-softmax loop (FlashAttention-2 structure, PASA's shift when the policy asks),
// rounding at every point the policy names. Multithreaded over (batch, head, query block).
void emulate_attention(const AttentionArgs& args, const ProblemShape& shape);

// The checks of args.policy that depend on the call rather than on the policy alone (PASA's shift
// matrix M must be invertible for the call's scale), as emulate_attention makes them before any work.
// The serving layouts, which run the emulator a sequence at a time, make them before their first write.
void check_emulator_policy(const AttentionArgs& args, std::int64_t dim);

}  // namespace pasa
