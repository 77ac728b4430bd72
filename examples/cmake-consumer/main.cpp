// SPDX-License-Identifier: Apache-2.0
// Runs the pasa policy on a small causal problem through the installed library and checks it against
// the library's fp64 reference: the exit code says whether the package links and works.
#include <pasa/attention.h>
#include <pasa/metrics.h>

#include <cmath>
#include <cstdio>
#include <vector>

// This project sets no C++ standard: linking pasa::core must bring the C++20 its headers need.
static_assert(__cplusplus >= 202002L, "pasa::core should make its users compile as C++20");

int main() {
  const int B = 1, H = 2, S = 64, D = 64;
  const std::size_t n = static_cast<std::size_t>(B) * H * S * D;
  std::vector<float> q(n), k(n), v(n), o(n), lse(static_cast<std::size_t>(B) * H * S);
  for (std::size_t i = 0; i < n; ++i) {  // smooth, deterministic, not constant
    q[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    k[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
    v[i] = static_cast<float>(std::sin(0.05 * static_cast<double>(i) + 1.0));
  }
  pasa::AttentionArgs args;
  args.q = pasa::bhsd_view(q.data(), pasa::DType::f32, B, H, S, D);
  args.k = pasa::bhsd_view(k.data(), pasa::DType::f32, B, H, S, D);
  args.v = pasa::bhsd_view(v.data(), pasa::DType::f32, B, H, S, D);
  args.o = pasa::bhsd_view(o.data(), pasa::DType::f32, B, H, S, D);
  args.lse = pasa::lse_view(lse.data(), B, H, S);
  args.causal = true;
  args.policy = pasa::parse_policy("pasa");
  pasa::attention(args);

  const pasa::ReferenceResult ref = pasa::reference_attention(args);
  const pasa::ErrorMetrics m = pasa::compare(std::vector<double>(o.begin(), o.end()), ref.o);
  std::printf("pasa policy vs fp64 reference: relative RMSE %.3e\n", m.rel_rmse);
  // fp16 throughout: a relative RMSE of a few fp16 unit roundoffs (2^-11 each) is right; 1e-2 is not.
  return m.rel_rmse < 1e-2 ? 0 : 1;
}
