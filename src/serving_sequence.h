// SPDX-License-Identifier: Apache-2.0
// What the serving layouts (pasa/serving.h) share: where a call runs, slicing one sequence out of a batched
// or packed view, and running that sequence as the dense problem pasa::attention would see.
#pragma once

#include <cstdint>

#include "attention_checks.h"
#include "pasa/attention.h"

namespace pasa {

// t[b, :, s0 : s0 + len, :] as a batch-of-one view (no copy).
TensorView slice_rows(const TensorView& t, std::int64_t b, std::int64_t s0, std::int64_t len);
// The matching rows of an LSE view (unchanged when its data is null).
LseView slice_rows(const LseView& lse, std::int64_t b, std::int64_t s0, std::int64_t len);

// Whether a serving call runs on the GPU (q on the device) or on the CPU emulator (host q); throws
// where options.backend asks for the other one.
bool serving_on_gpu(const AttentionArgs& options, const TensorView& q);

// Throws pasa::Error naming `call` when options carries an attention mask: one [B, H_q, S_q, S_kv]
// mask cannot follow the sequences' own lengths (a sequence's rows would be checked against it only
// when its turn came, after earlier sequences were written).
void refuse_serving_mask(const AttentionArgs& options, const char* call);

// Throws pasa::ResourceError, before anything is written, unless the emulator's run of the largest
// sequence (`largest`, batch 1) and `extra_bytes` (a gathered copy of its keys) fit in memory; the
// message gives the sequence's shapes in the caller's `form`.
void require_sequence_memory(const ProblemShape& largest, const Policy& policy, std::uint64_t extra_bytes,
                             ViewForm form = ViewForm::bhsd);

// Runs one sequence (q, k, v, o, lse its batch-of-one views) through the emulator with options' policy
// and settings, adding its rows to `stats`. An empty q does nothing; no keys at all makes every row
// fully masked: O = 0, LSE = -inf, as the dense API defines such rows.
void run_sequence(const AttentionArgs& options, const TensorView& q, const TensorView& k,
                  const TensorView& v, const TensorView& o, const LseView& lse, AttentionStats& stats);

}  // namespace pasa
