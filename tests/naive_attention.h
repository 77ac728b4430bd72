// SPDX-License-Identifier: Apache-2.0
// An fp64 attention written for the tests alone: its own loops and its own causal rule, sharing no
// code with the library. The emulator and the library's fp64 reference both call one mask helper, so
// a bug there moves both the same way; only an oracle like this one can see it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace pasa::test {

enum class Mask { none, causal_top_left, causal_bottom_right };

// How many keys query r sees: a causal row sees a prefix of the keys. Top-left (PyTorch's
// tril(ones(S_q, S_kv))) lets row r see keys 0..r; bottom-right aligns the last query with the last
// key, so the diagonal moves right by S_kv - S_q and rows of a longer query side may see nothing.
inline std::int64_t visible_prefix(Mask mask, std::int64_t r, std::int64_t seq_q, std::int64_t seq_kv) {
  if (mask == Mask::none) return seq_kv;
  const std::int64_t diagonal = mask == Mask::causal_bottom_right ? seq_kv - seq_q : 0;
  return std::clamp<std::int64_t>(r + diagonal + 1, 0, seq_kv);
}

struct NaiveResult {
  std::vector<double> o;    // [seq_q][dim]
  std::vector<double> lse;  // [seq_q], -inf for a row without keys
};

// One head: q [seq_q][dim], k and v [seq_kv][dim], row-major. Score (r, c) = alpha (q_r . k_c +
// key_bias[c]) when key_bias is given (smooth Q's correction term), else alpha q_r . k_c.
inline NaiveResult naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, std::int64_t seq_q, std::int64_t seq_kv,
                                   std::int64_t dim, double alpha, Mask mask,
                                   const std::vector<double>& key_bias = {}) {
  NaiveResult out{std::vector<double>(static_cast<std::size_t>(seq_q * dim), 0.0),
                  std::vector<double>(static_cast<std::size_t>(seq_q), 0.0)};
  for (std::int64_t r = 0; r < seq_q; ++r) {
    const std::int64_t n = visible_prefix(mask, r, seq_q, seq_kv);
    if (n == 0) {
      out.lse[r] = -std::numeric_limits<double>::infinity();
      continue;
    }
    std::vector<double> s(static_cast<std::size_t>(n));
    for (std::int64_t c = 0; c < n; ++c) {
      double dot = key_bias.empty() ? 0.0 : key_bias[c];
      for (std::int64_t d = 0; d < dim; ++d) dot += q[r * dim + d] * k[c * dim + d];
      s[c] = alpha * dot;
    }
    const double top = *std::max_element(s.begin(), s.end());
    double total = 0.0;
    for (std::int64_t c = 0; c < n; ++c) {
      const double w = std::exp(s[c] - top);
      total += w;
      for (std::int64_t d = 0; d < dim; ++d) out.o[r * dim + d] += w * v[c * dim + d];
    }
    for (std::int64_t d = 0; d < dim; ++d) out.o[r * dim + d] /= total;
    out.lse[r] = top + std::log(total);
  }
  return out;
}

}  // namespace pasa::test
