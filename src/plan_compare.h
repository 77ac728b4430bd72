// SPDX-License-Identifier: Apache-2.0
// What a plan's run() compares of a call with the problem the plan was made for: every field but the
// data pointers, the stream and the stats (AttentionPlan, KVCachePlan).
#pragma once

#include "pasa/attention.h"

namespace pasa {

bool same_view(const TensorView& a, const TensorView& b);
bool same_lse(const LseView& a, const LseView& b);

// The first field of AttentionArgs in which a call's problem differs from the plan's, or null.
// Compared: every field but the data pointers (the mask's too, once both are set or both null), the
// stream and the stats.
const char* differing_field(const AttentionArgs& call, const AttentionArgs& plan);

}  // namespace pasa
