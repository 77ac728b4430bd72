// SPDX-License-Identifier: Apache-2.0
// Validation of AttentionArgs shared by every backend: each failure is a pasa::Error naming the
// argument, raised before any output is touched.
#pragma once

#include <string>

#include "pasa/attention.h"

namespace pasa {

// The resolved problem size, after the checks.
struct ProblemShape {
  std::int64_t batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  std::int64_t group() const { return heads_q / heads_kv; }  // query heads per K/V head
};

// One view as every entry point checks it, naming it `name`: a supported dtype, every size >= 1,
// strides >= 0 (>= 1 for an output, which is written), a data pointer.
void check_view(const TensorView& t, const char* name, bool is_output);

// Checks pointers, shapes, GQA head counts, strides, devices, the LSE view and the scale, then
// check_output_memory.
ProblemShape check_attention_args(const AttentionArgs& args);

// check_attention_args without check_output_memory: for views that describe a problem rather than memory
// (a KV cache's keys as one sequence of full capacity), whose caller checks the real tensors' memory.
ProblemShape check_attention_problem(const AttentionArgs& args);

// The outputs o and lse each address a distinct element per index, and neither shares memory with q,
// k, v, the mask or the other (memory_overlap.h: byte ranges compared).
void check_output_memory(const AttentionArgs& args);

// "q [B, H_q, S_q, D], k/v [B, H_kv, S_kv, D]" for messages about a whole problem.
std::string problem_text(const ProblemShape& p);

// alpha: the caller's scale or 1/sqrt(D).
double resolve_scale(const AttentionArgs& args, std::int64_t dim);

// Throws if an additive host mask holds NaN or +inf, naming the first [b, h, r, c] index.
void check_mask_values(const MaskView& mask);

// Throws if a host tensor holds NaN or inf, naming it and the first [b, h, s, d] index. A slice of
// a larger tensor passes the row its row 0 is there (`first_row`), so the index names that tensor's row.
void check_finite_host(const TensorView& t, const char* name, std::int64_t first_row = 0);

// Whether key `key` is visible to query `query` (both 0-based) under the causal setting.
inline bool key_visible(bool causal, CausalAlignment alignment, std::int64_t query, std::int64_t key,
                        std::int64_t seq_q, std::int64_t seq_kv) {
  if (!causal) return true;
  const std::int64_t last = alignment == CausalAlignment::bottom_right ? query + seq_kv - seq_q : query;
  return key <= last;
}

}  // namespace pasa
