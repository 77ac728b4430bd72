// SPDX-License-Identifier: Apache-2.0
// The fp64 reference: attention written as plainly as possible, the oracle for every other path.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention_checks.h"
#include "cpu/host_inputs.h"
#include "cpu/parallel_for.h"
#include "cpu/score_mods.h"
#include "interrupt.h"
#include "memory_budget.h"
#include "pasa/attention.h"
#include "pasa/error.h"

namespace pasa {

ReferenceResult reference_attention(const AttentionArgs& args) {
  // o and lse are neither read nor written (the result is returned): checked as absent, o standing in
  // as a view of q's shape that is never touched (so its memory is not checked either).
  // (Strides of 1: a dense view's could pass int64 for a broadcast q of 2^58 rows, before the
  // memory check below names the real need.)
  static float untouched = 0.0f;
  AttentionArgs checked = args;
  checked.o = args.q;
  checked.o.data = &untouched;
  checked.o.dtype = DType::f32;
  checked.o.stride = {1, 1, 1, 1};
  checked.lse = LseView{};
  const ProblemShape p = check_attention_problem(checked);
  if (args.q.device != Device::cpu) throw Error("reference_attention: q, k, v must be host tensors");
  // O and the LSE in fp64, and per thread one head's Q, K and V in fp64.
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  // Every product saturates: broadcast (stride-0) views can name 2^64 heads or more.
  const std::uint64_t outputs = saturating_product({u(p.batch), u(p.heads_q), u(p.seq_q), u(p.dim) + 1, 8});
  const std::uint64_t per_thread =
      saturating_product({saturating_sum({u(p.seq_q), u(p.seq_kv), u(p.seq_kv)}), u(p.dim) + 1, 8});
  const std::uint64_t threads = u(omp_get_max_threads());
  require_memory(saturating_sum({outputs, saturating_product({threads, per_thread})}),
                 "reference attention (fp64) on " + problem_text(p));
  check_finite_host(args.q, "q");
  check_finite_host(args.k, "k");
  check_finite_host(args.v, "v");
  const double alpha = resolve_scale(args, p.dim);
  const Rounder to_input(args.policy.input);
  check_fits_input(args.q, "q", to_input);
  check_fits_input(args.k, "k", to_input);
  check_fits_input(args.v, "v", to_input);
  const ScoreMods mods(args, p);
  const std::int64_t D = p.dim;

  ReferenceResult result;
  result.o.assign(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q * D), 0.0);
  result.lse.assign(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q), 0.0);

  // Tasks of kRowsPerTask query rows, so that a call of one head still spreads over the threads and
  // parallel_for's interrupt checks (between tasks, on the calling thread) come every few rows. Each
  // thread keeps the fp64 Q, K and V of the head it last worked on.
  constexpr std::int64_t kRowsPerTask = 64;
  const std::int64_t chunks = (p.seq_q + kRowsPerTask - 1) / kRowsPerTask;
  struct HeadInputs {
    std::int64_t head = -1, kv_head = -1;  // the (batch, head) pairs q and k, v were gathered for
    std::vector<double> q, k, v;
  };
  std::vector<HeadInputs> per_thread_inputs(static_cast<std::size_t>(omp_get_max_threads()));
  parallel_for(p.batch * p.heads_q * chunks, [&](std::int64_t task) {
    const std::int64_t head = task / chunks, r_begin = task % chunks * kRowsPerTask;
    const std::int64_t r_end = std::min(p.seq_q, r_begin + kRowsPerTask);
    const std::int64_t b = head / p.heads_q, h = head % p.heads_q;
    HeadInputs& in = per_thread_inputs[static_cast<std::size_t>(omp_get_thread_num())];
    // (the previous head's buffers freed first: the estimate above counts one head's a thread)
    if (in.head != head) {
      std::vector<double>().swap(in.q);
      in.q = gather_head<double>(args.q, b, h, to_input);
      in.head = head;
    }
    if (const std::int64_t kv_head = b * p.heads_kv + h / p.group(); in.kv_head != kv_head) {
      std::vector<double>().swap(in.k);
      std::vector<double>().swap(in.v);
      in.kv_head = -1;  // (until both are gathered again)
      in.k = gather_head<double>(args.k, b, h / p.group(), to_input);
      in.v = gather_head<double>(args.v, b, h / p.group(), to_input);
      in.kv_head = kv_head;
    }
    const std::vector<double>& q = in.q;
    const std::vector<double>& k = in.k;
    const std::vector<double>& v = in.v;
    std::vector<double> scores(static_cast<std::size_t>(p.seq_kv));
    for (std::int64_t r = r_begin; r < r_end; ++r) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t c = 0; c < p.seq_kv; ++c) {
        if (c % kRowsPerPoll == 0) poll_interrupt();  // (a decode row of millions of keys is one task)
        if (!mods.visible(b, h, r, c)) {
          scores[c] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double dot = 0.0;
        for (std::int64_t d = 0; d < D; ++d) dot += q[r * D + d] * k[c * D + d];
        scores[c] = alpha * dot;
        if (mods.softcapped()) scores[c] = mods.cap(scores[c], [](double x) { return x; });
        scores[c] += mods.bias(b, h, r, c);
        m = std::max(m, scores[c]);
      }
      const std::int64_t row = (b * p.heads_q + h) * p.seq_q + r;
      double* o = &result.o[static_cast<std::size_t>(row * D)];
      if (m == -std::numeric_limits<double>::infinity()) {  // every key masked: O = 0, LSE = -inf
        result.lse[row] = m;
        continue;
      }
      double l = 0.0;
      for (std::int64_t c = 0; c < p.seq_kv; ++c) {
        if (scores[c] == -std::numeric_limits<double>::infinity()) continue;
        const double w = std::exp(scores[c] - m);
        l += w;
        for (std::int64_t d = 0; d < D; ++d) o[d] += w * v[c * D + d];
      }
      for (std::int64_t d = 0; d < D; ++d) o[d] /= l;
      result.lse[row] = m + std::log(l);
    }
  });
  return result;
}

}  // namespace pasa
