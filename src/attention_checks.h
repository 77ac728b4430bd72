// SPDX-License-Identifier: Apache-2.0
// Validation of AttentionArgs shared by every backend: each failure is a pasa::Error naming the
// argument, raised before any output is touched.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "pasa/attention.h"

namespace pasa {

// The resolved problem size, after the checks.
struct ProblemShape {
  std::int64_t batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  std::int64_t group() const { return heads_q / heads_kv; }  // query heads per K/V head
};

// How the caller laid the views out, which the messages follow: [B, H, S, D], or packed tokens
// [total, H, D] (pasa/serving.h: packed_view makes the [1, H, total, D] view), where a tensor may hold
// no token at all (an empty batch).
enum class ViewForm { bhsd, packed };

// One view as every entry point checks it, naming it `name`: a supported dtype, batch 1 if packed, every
// size >= 1 (a packed token count >= 0), strides >= 0 (>= 1 for an output, which is written; any for a
// size-1 dimension, whose stride is never read), a data pointer unless the view is empty.
void check_view(const TensorView& t, const char* name, bool is_output, ViewForm form = ViewForm::bhsd);

// t's strides with each size-1 dimension's replaced by the one a dense layout would give it (the next
// inner stride times that dimension's extent): its index is always 0, so its stride addresses
// nothing, and exporters give it any value (DLPack from torch before 2.9 gives 1, which is no
// multiple of the 16 bytes the CUDA kernels need). The CUDA kernels and their tensor maps are handed
// these.
std::array<std::int64_t, 4> canonical_strides(const TensorView& t);

// Checks pointers, shapes, GQA head counts, strides, devices, the LSE view and the scale, then
// check_output_memory.
ProblemShape check_attention_args(const AttentionArgs& args, ViewForm form = ViewForm::bhsd);

// check_attention_args without check_output_memory: for views that describe a problem rather than memory
// (a KV cache's keys as one sequence of full capacity), whose caller checks the real tensors' memory.
ProblemShape check_attention_problem(const AttentionArgs& args, ViewForm form = ViewForm::bhsd);

// The outputs o and lse each address a distinct element per index, and neither shares memory with q,
// k, v, the mask or the other (memory_overlap.h: byte ranges compared).
void check_output_memory(const AttentionArgs& args, ViewForm form = ViewForm::bhsd);

// "q [B, H_q, S_q, D], k/v [B, H_kv, S_kv, D]" for messages about a whole problem ("q [S_q, H_q, D],
// k/v [S_kv, H_kv, D]" packed).
std::string problem_text(const ProblemShape& p, ViewForm form = ViewForm::bhsd);

// Throws, naming the scale `name`, when a caller's scale is not finite or lies beyond fp32 or the format
// the policy multiplies it in (where it would be inf). check_attention_args runs it; `pasa run` before
// it reads its files.
void check_scale(double scale, const Policy& policy, const char* name = "scale");

// alpha: the caller's scale or 1/sqrt(D).
double resolve_scale(const AttentionArgs& args, std::int64_t dim);

// Throws if an additive host mask holds NaN or +inf, naming the first [b, h, r, c] index.
void check_mask_values(const MaskView& mask);

// Where a checked view's elements are in the caller's tensor, for the index a message names: the view
// itself ([b, h, s, d]), or rows of a packed tensor from token `first_token` on ([token, h, d]).
struct ElementIndex {
  ViewForm form = ViewForm::bhsd;
  std::int64_t first_token = 0;
  std::string at(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) const;
};

// Throws if a host tensor holds NaN or inf, naming it and the first index (`where` says how).
void check_finite_host(const TensorView& t, const char* name, const ElementIndex& where = {});

// Whether key `key` is visible to query `query` (both 0-based) under the causal setting.
inline bool key_visible(bool causal, CausalAlignment alignment, std::int64_t query, std::int64_t key,
                        std::int64_t seq_q, std::int64_t seq_kv) {
  if (!causal) return true;
  const std::int64_t last = alignment == CausalAlignment::bottom_right ? query + seq_kv - seq_q : query;
  return key <= last;
}

}  // namespace pasa
