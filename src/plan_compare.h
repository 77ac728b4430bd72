// SPDX-License-Identifier: Apache-2.0
// What a plan's run() compares of a call with the problem the plan was made for: every field but the
// data pointers, the stream and the stats (AttentionPlan, KVCachePlan).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <utility>

#include "pasa/attention.h"

namespace pasa {

bool same_view(const TensorView& a, const TensorView& b);
bool same_lse(const LseView& a, const LseView& b);

// The first field of AttentionArgs in which a call's problem differs from the plan's, or null.
// Compared: every field but the data pointers (the mask's too, once both are set or both null), the
// stream and the stats; strides where they address something (a size-1 dimension's do not).
const char* differing_field(const AttentionArgs& call, const AttentionArgs& plan);

// What every plan's run() checks of a call: pasa::Error naming `field` unless it is null (the first
// field in which the call differs from the planned problem), and unless a GPU plan that needs
// `needed` bytes of workspace got one.
void check_same_problem(const char* field);
void check_workspace(std::size_t needed, const void* workspace);
// pasa::Error "<name>: data pointer is null" for the first tensor given without data.
void check_data_pointers(std::initializer_list<std::pair<const TensorView*, const char*>> tensors);

}  // namespace pasa
