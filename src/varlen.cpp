// SPDX-License-Identifier: Apache-2.0
// pasa::attention_varlen: check the packed tensors and both cu_seqlens, then run each sequence on its
// slices of the packed tensors (the emulator for host tensors, the dense GPU call for device ones).
#include "text/format.h"

#include <algorithm>
#include <memory>
#include <tuple>
#include <vector>

#include "attention_checks.h"
#include "cpu/backends.h"
#include "cpu/host_inputs.h"
#include "cuda_backend.h"
#include "memory_budget.h"
#include "memory_overlap.h"
#include "pasa/error.h"
#include "pasa/serving.h"
#include "serving_sequence.h"

namespace pasa {
namespace {

// cu_seqlens: [batch + 1] non-decreasing offsets from >= 0 to <= total, no sequence over max_seqlen.
void check_cu_seqlens(const std::int32_t* cu, std::int64_t batch, std::int64_t total,
                      std::int64_t max_seqlen, const char* name, const char* max_name) {
  if (cu[0] < 0) throw Error(text::format("{}: {}[0] = {} is negative", name, name, cu[0]));
  const auto check_within = [&](std::int64_t i) {
    if (cu[i] > total) {
      throw Error(text::format("{}: {}[{}] = {} is past the end of the {} packed tokens", name, name, i, cu[i],
                               total));
    }
  };
  check_within(0);
  for (std::int64_t b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      throw Error(text::format("{}: decreases: {}[{}] = {} > {}[{}] = {}", name, name, b, cu[b], name,
                              b + 1, cu[b + 1]));
    }
    check_within(b + 1);  // (before the length: a sequence past the end names its offset)
    if (cu[b + 1] - cu[b] > max_seqlen) {
      throw Error(text::format("{}: {} is less than sequence {}'s length {}", max_name, max_seqlen, b,
                              cu[b + 1] - cu[b]));
    }
  }
}

// o and lse stay apart from the offsets (batch + 1 of each, already read and checked), which the call
// reads while it writes them. (Their own elements and the tensors are check_attention_args'.)
void check_outputs_apart_from_offsets(const VarlenArgs& args) {
  const std::int64_t offsets = args.batch + 1;
  const NamedMemory indices[2] = {{memory_of(args.cu_seqlens_q, offsets), "cu_seqlens_q"},
                                  {memory_of(args.cu_seqlens_k, offsets), "cu_seqlens_k"}};
  check_outputs_apart(args.o, args.lse, indices);
}

// cu_seqlens_q and cu_seqlens_k as host copies (checked against memory before they are allocated),
// checked: device offsets must come to the host, and host offsets may change during the call (another
// thread of a Python program, the GIL released), so the checks and the work read the copies.
struct HostOffsets {
  std::vector<std::int32_t> q, k;
};

HostOffsets read_offsets(const VarlenArgs& args, const ProblemShape& shape, bool on_gpu) {
  const std::int64_t B = args.batch;
  if (args.cu_seqlens_q == nullptr) throw Error("cu_seqlens_q: pointer is null");
  if (args.cu_seqlens_k == nullptr) throw Error("cu_seqlens_k: pointer is null");
  require_memory(saturating_product({static_cast<std::uint64_t>(B) + 1, 2 * sizeof(std::int32_t)}),
                 "attention_varlen: cu_seqlens_q and cu_seqlens_k copied to the host");
  HostOffsets o{std::vector<std::int32_t>(static_cast<std::size_t>(B + 1)),
                std::vector<std::int32_t>(static_cast<std::size_t>(B + 1))};
  if (on_gpu) {
    const std::size_t bytes = o.q.size() * sizeof(std::int32_t);
    if (!cuda_read_to_host(o.q.data(), args.cu_seqlens_q, bytes, args.options.stream, "cu_seqlens_q") ||
        !cuda_read_to_host(o.k.data(), args.cu_seqlens_k, bytes, args.options.stream, "cu_seqlens_k")) {
      throw Error("cu_seqlens_q: attention_varlen on the GPU reads the offsets on the host, which a stream "
                  "being captured into a CUDA graph cannot wait for: call it outside the capture");
    }
  } else {
    std::copy_n(args.cu_seqlens_q, o.q.size(), o.q.begin());
    std::copy_n(args.cu_seqlens_k, o.k.size(), o.k.begin());
  }
  check_cu_seqlens(o.q.data(), B, shape.seq_q, args.max_seqlen_q, "cu_seqlens_q", "max_seqlen_q");
  check_cu_seqlens(o.k.data(), B, shape.seq_kv, args.max_seqlen_k, "cu_seqlens_k", "max_seqlen_k");
  check_outputs_apart_from_offsets(args);
  return o;
}

// The GPU path: each sequence is the dense GPU call on its slices (a sequence without keys gets the
// fully masked rows' result directly).
void varlen_on_gpu(const VarlenArgs& args, const ProblemShape& shape) {
  const std::int64_t B = args.batch;
  const HostOffsets offsets = read_offsets(args, shape, true);
  const std::vector<std::int32_t>& cq = offsets.q;
  const std::vector<std::int32_t>& ck = offsets.k;
  // Sequence b as the dense call sees it.
  const auto sequence = [&](std::int64_t b) {
    const std::int64_t q0 = cq[b], nq = cq[b + 1] - cq[b], k0 = ck[b], nk = ck[b + 1] - ck[b];
    AttentionArgs a = args.options;
    a.q = slice_rows(args.q, 0, q0, nq);
    a.k = slice_rows(args.k, 0, k0, nk);
    a.v = slice_rows(args.v, 0, k0, nk);
    a.o = slice_rows(args.o, 0, q0, nq);
    a.lse = slice_rows(args.lse, 0, q0, nq);
    return a;
  };
  // Every sequence is planned, and the memory checked and the device memory of the largest taken,
  // before the first launch: nothing is written unless every sequence can run.
  for (const auto& [data, name] : {std::pair<const void*, const char*>{args.q.data, "q"}, {args.k.data, "k"},
                                    {args.v.data, "v"}, {args.o.data, "out"}, {args.lse.data, "lse"}}) {
    if (data != nullptr) cuda_check_device_memory(data, name);
  }
  std::vector<std::shared_ptr<const CudaPlan>> plans(static_cast<std::size_t>(B));  // null: no keys
  for (std::int64_t b = 0; b < B; ++b) {
    const AttentionArgs a = sequence(b);
    if (a.q.seq() == 0) continue;
    cuda_check_aligned_operands(a);  // (each run checks it too, after the rows without keys are written)
    if (a.k.seq() == 0) {
      cuda_check_empty_rows(a.o, a.lse);
      // No kernel runs for these rows, but the call is refused as the same rows with keys would be
      // (dtype, head dim, policy, device): their plan against one key, in contiguous rows (an empty
      // tensor's strides are its producer's choice, 0 among them).
      AttentionArgs one_key = a;
      for (TensorView* t : {&one_key.k, &one_key.v}) {
        t->shape[2] = 1;
        t->stride = {t->shape[1] * t->shape[3], t->shape[3], t->shape[3], 1};
      }
      static_cast<void>(plan_cuda_attention(
          one_key, ProblemShape{1, shape.heads_q, shape.heads_kv, a.q.seq(), 1, shape.dim}));
    } else {
      plans[static_cast<std::size_t>(b)] = plan_cuda_attention(a, check_attention_args(a));
    }
  }
  cuda_reserve_scratch(plans, args.options.stream);
  AttentionStats stats;
  for (std::int64_t b = 0; b < B; ++b) {
    AttentionArgs a = sequence(b);
    if (a.q.seq() == 0) continue;
    const auto& plan = plans[static_cast<std::size_t>(b)];
    if (plan == nullptr) {
      cuda_write_empty_rows(a.o, a.lse, args.options.stream);
      stats.rows += shape.heads_q * a.q.seq();
      continue;
    }
    AttentionStats one;
    a.stats = args.options.stats != nullptr ? &one : nullptr;
    run_cuda_plan_pooled(*plan, a);
    stats.rows += one.rows;
    stats.recomputed_rows += one.recomputed_rows;
  }
  if (args.options.stats != nullptr) *args.options.stats = stats;
}

}  // namespace

void attention_varlen(const VarlenArgs& args) {
  const bool on_gpu = serving_on_gpu(args.options, args.q);
  refuse_serving_mask(args.options, "attention_varlen");
  AttentionArgs whole = args.options;
  whole.q = args.q;
  whole.k = args.k;
  whole.v = args.v;
  whole.o = args.o;
  whole.lse = args.lse;
  // In the packed form: messages name [total, H, D], and a batch without tokens (total 0) is valid.
  const ProblemShape shape = check_attention_args(whole, ViewForm::packed);
  if (args.batch < 1) throw Error(text::format("batch: {} (must be at least 1)", args.batch));
  if (on_gpu) {
    varlen_on_gpu(args, shape);
    return;
  }
  if (shape.dim > 1024) {
    throw Error(text::format("q: head dim {} is larger than the CPU backends' 1024", shape.dim));
  }
  const std::int64_t B = args.batch;
  const HostOffsets offsets = read_offsets(args, shape, false);
  const std::int32_t *cq = offsets.q.data(), *ck = offsets.k.data();
  std::int64_t longest_q = 0, longest_k = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    longest_q = std::max<std::int64_t>(longest_q, cq[b + 1] - cq[b]);
    longest_k = std::max<std::int64_t>(longest_k, ck[b + 1] - ck[b]);
  }
  require_sequence_memory({1, shape.heads_q, shape.heads_kv, longest_q, longest_k, shape.dim},
                          args.options.policy, 0, ViewForm::packed);
  // Only the tokens the sequences own are read, so only they must be finite, and fit the policy's
  // input format (checked here for every sequence: the emulator would check each only in its turn).
  const Rounder input(args.options.policy.input);
  for (const auto& [t, name, first, count] : {std::tuple{&args.q, "q", cq[0], cq[B] - cq[0]},
                                              {&args.k, "k", ck[0], ck[B] - ck[0]},
                                              {&args.v, "v", ck[0], ck[B] - ck[0]}}) {
    const TensorView owned = slice_rows(*t, 0, first, count);
    const ElementIndex where{ViewForm::packed, first};
    check_finite_host(owned, name, where);
    check_fits_input(owned, name, input, where);
  }

  // The policy's checks that depend on the call (PASA's M and the scale), which the emulator would make
  // only in the first sequence with keys, after earlier sequences' rows were written.
  check_emulator_policy(args.options, shape.dim);

  AttentionStats stats;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t q0 = cq[b], nq = cq[b + 1] - cq[b], k0 = ck[b], nk = ck[b + 1] - ck[b];
    run_sequence(args.options, slice_rows(args.q, 0, q0, nq), slice_rows(args.k, 0, k0, nk),
                 slice_rows(args.v, 0, k0, nk), slice_rows(args.o, 0, q0, nq),
                 slice_rows(args.lse, 0, q0, nq), stats);
  }
  if (args.options.stats != nullptr) *args.options.stats = stats;
}

}  // namespace pasa
