// SPDX-License-Identifier: Apache-2.0
// Runs the library on one head given as row-major doubles (fp32 storage), with poisoned outputs, so
// a test can hold its inputs, an oracle's result and the library's result side by side.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "pasa/attention.h"
#include "test_util.h"

namespace pasa::test {

struct HeadProblem {
  std::vector<double> q, k, v;  // [seq_q][dim], [seq_kv][dim], [seq_kv][dim]
  std::int64_t seq_q = 0, seq_kv = 0, dim = 0;
  std::optional<double> scale;  // alpha; 1/sqrt(dim) when empty
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::bottom_right;
};

struct HeadOutput {
  std::vector<double> o;    // [seq_q][dim]
  std::vector<double> lse;  // [seq_q]
};

inline Tensor4 fp32_head(const std::vector<double>& values, std::int64_t seq, std::int64_t dim) {
  Tensor4 t = make_tensor(1, 1, seq, dim, DType::f32);
  for (std::int64_t i = 0; i < seq * dim; ++i) store_from_double(t.bytes.data(), DType::f32, i, values[i]);
  return t;
}

// The library's attention (the emulator for host tensors) under `policy`.
inline HeadOutput run_head(const HeadProblem& p, const Policy& policy) {
  Tensor4 q = fp32_head(p.q, p.seq_q, p.dim), k = fp32_head(p.k, p.seq_kv, p.dim),
          v = fp32_head(p.v, p.seq_kv, p.dim), o = make_tensor(1, 1, p.seq_q, p.dim, DType::f32);
  poison(o);
  std::vector<float> lse(static_cast<std::size_t>(p.seq_q), std::nanf(""));
  AttentionArgs args{q.view, k.view, v.view, o.view, lse_view(lse.data(), 1, 1, p.seq_q)};
  args.scale = p.scale;
  args.causal = p.causal;
  args.alignment = p.alignment;
  args.policy = policy;
  attention(args);
  return HeadOutput{read_bhsd(o.view), std::vector<double>(lse.begin(), lse.end())};
}

// The library's own fp64 reference on the same problem.
inline HeadOutput reference_head(const HeadProblem& p) {
  Tensor4 q = fp32_head(p.q, p.seq_q, p.dim), k = fp32_head(p.k, p.seq_kv, p.dim),
          v = fp32_head(p.v, p.seq_kv, p.dim), o = make_tensor(1, 1, p.seq_q, p.dim, DType::f32);
  AttentionArgs args{q.view, k.view, v.view, o.view};
  args.scale = p.scale;
  args.causal = p.causal;
  args.alignment = p.alignment;
  const ReferenceResult ref = reference_attention(args);
  return HeadOutput{ref.o, ref.lse};
}

// Largest |a - b| over matching elements; infinity if either holds a non-finite value.
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace pasa::test
