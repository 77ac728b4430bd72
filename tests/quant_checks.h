// SPDX-License-Identifier: Apache-2.0
// SageAttention2's front end (smooth Q with its correction dS, smooth K, INT8/INT4 quantization of Q
// and K at each granularity) checked against a model written here from the rules in
// include/pasa/quantize.h and include/pasa/policy.h. The policies keep every other rounding point in
// fp32, so the emulator must equal fp64 attention on the model's dequantized Q, K (plus dS) within the
// fp32 bound: turning a smoothing off, dropping dS, or quantizing with other groups than the policy
// names moves the scores by a quantization step, orders of magnitude beyond that bound.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>

#include "naive_attention.h"
#include "one_head.h"
#include "pasa/policy.h"
#include "test_util.h"
#include "tolerance.h"

namespace pasa::test {

// Q and K with what each mechanism acts on: a bias per channel shared by every token (smoothing
// removes it), a few outlier channels with a large same-signed offset (they set a group's scale when
// nothing is smoothed), and a per-token magnitude spread over 8x (so groups of different rows get
// different scales). V ~ U(-1, 1). Values are fp32 numbers.
inline HeadProblem biased_outlier_head(std::uint64_t seed, std::int64_t sq, std::int64_t skv, std::int64_t dim) {
  std::mt19937_64 rng(seed);
  auto channel_bias = [&](double bias, double outlier) {
    std::vector<double> b(static_cast<std::size_t>(dim));
    for (double& x : b) x = uniform(rng, -bias, bias);
    for (int i = 0; i < 4; ++i) {
      const auto d = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(dim));
      b[d] = (rng() % 2 ? 1.0 : -1.0) * outlier * uniform(rng, 0.9, 1.1);
    }
    return b;
  };
  auto fill = [&](std::vector<double>& m, std::int64_t rows, const std::vector<double>& bias) {
    m.resize(static_cast<std::size_t>(rows * dim));
    for (std::int64_t r = 0; r < rows; ++r) {
      const double magnitude = uniform(rng, 0.25, 2.0);
      for (std::int64_t d = 0; d < dim; ++d)
        m[r * dim + d] = static_cast<float>(bias[d] + magnitude * uniform(rng, -1.0, 1.0));
    }
  };
  HeadProblem p;
  p.seq_q = sq;
  p.seq_kv = skv;
  p.dim = dim;
  fill(p.q, sq, channel_bias(3.0, 20.0));
  fill(p.k, skv, channel_bias(5.0, 50.0));
  p.v.resize(static_cast<std::size_t>(skv * dim));
  for (double& x : p.v) x = static_cast<float>(uniform(rng, -1.0, 1.0));
  // |q| ~ 40 (the outlier channels) against key noise of ~0.6 per channel: a row's scores spread over
  // ~0.07 x 40 x 0.6 ~ 2 units, so many keys carry weight and a score error shows in the output.
  p.scale = 0.07;
  return p;
}

// The group of `row` under the granularity (include/pasa/quantize.h's table): rows sharing a key
// share one scale. Queries: warps are 16-row slabs, a thread holds rows r and r + 8 of its slab.
// Keys: warp is the key block, a thread holds the keys of a block with the same index mod 8.
inline std::pair<std::int64_t, std::int64_t> group_of(Granularity g, bool query, std::int64_t row,
                                                      std::int64_t block) {
  switch (g) {
    case Granularity::tensor: return {0, 0};
    case Granularity::block: return {row / block, 0};
    case Granularity::warp: return {query ? row / 16 : row / block, 0};
    case Granularity::thread: return {query ? row / 16 : row / block, row % 8};
    case Granularity::token: return {row, 0};
  }
  return {row, 0};
}

// Symmetric quantization to the integer grid of `f`, each group scaled by max|x| / qmax, returned
// dequantized (value = integer * scale). Rounding to nearest, ties to even (the default mode).
inline std::vector<double> dequantized(const std::vector<float>& x, std::int64_t rows, std::int64_t dim,
                                       const Format& f, Granularity g, bool query, std::int64_t block) {
  const double qmax = std::ldexp(1.0, f.int_bits - 1) - 1.0;
  std::map<std::pair<std::int64_t, std::int64_t>, double> group_max;
  for (std::int64_t r = 0; r < rows; ++r) {
    double& m = group_max[group_of(g, query, r, block)];
    for (std::int64_t d = 0; d < dim; ++d) m = std::max(m, std::fabs(static_cast<double>(x[r * dim + d])));
  }
  std::vector<double> out(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double delta = group_max[group_of(g, query, r, block)] / qmax;
    for (std::int64_t d = 0; d < dim; ++d) {
      out[r * dim + d] = delta == 0.0 ? 0.0 : std::nearbyint(x[r * dim + d] / delta) * delta;
    }
  }
  return out;
}

// Subtracts the mean over tokens of every channel (fp64 mean, fp32 result, as a GPU prepass would).
inline std::vector<double> smooth(std::vector<float>& x, std::int64_t rows, std::int64_t dim) {
  std::vector<double> mean(static_cast<std::size_t>(dim), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t d = 0; d < dim; ++d) mean[d] += x[r * dim + d];
  for (double& m : mean) m /= static_cast<double>(rows);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t d = 0; d < dim; ++d) x[r * dim + d] = static_cast<float>(x[r * dim + d] - mean[d]);
  return mean;
}

struct FrontEnd {
  std::vector<double> q, k;  // dequantized operands as the Q K^T product sees them
  std::vector<double> ds;    // smooth Q's correction per key (empty without smooth Q)
  std::vector<double> lse_offset;  // per query: what smooth K took out of the row's scores
};

// The model of the policy's front end on fp32 inputs with the scale applied to the scores.
inline FrontEnd model_front_end(const HeadProblem& p, const Policy& pol) {
  std::vector<float> q(p.q.begin(), p.q.end()), k(p.k.begin(), p.k.end());
  FrontEnd out;
  out.lse_offset.assign(static_cast<std::size_t>(p.seq_q), 0.0);
  if (pol.smooth_k) {
    // Removes alpha q . mean_k from every score of row r: the softmax cannot see it, the LSE can.
    const std::vector<double> k_mean = smooth(k, p.seq_kv, p.dim);
    for (std::int64_t r = 0; r < p.seq_q; ++r)
      for (std::int64_t d = 0; d < p.dim; ++d) out.lse_offset[r] += *p.scale * q[r * p.dim + d] * k_mean[d];
  }
  if (pol.smooth_q) {
    // Q = q_m + (Q - q_m): the mean row's product with every key comes back as dS, fp32 on the GPU.
    const std::vector<double> q_mean = smooth(q, p.seq_q, p.dim);
    for (std::int64_t c = 0; c < p.seq_kv; ++c) {
      double dot = 0.0;
      for (std::int64_t d = 0; d < p.dim; ++d) dot += q_mean[d] * k[c * p.dim + d];
      out.ds.push_back(static_cast<float>(dot));
    }
  }
  out.q = pol.q_quant ? dequantized(q, p.seq_q, p.dim, *pol.q_quant, pol.q_gran, true, pol.block_q)
                      : std::vector<double>(q.begin(), q.end());
  out.k = pol.k_quant ? dequantized(k, p.seq_kv, p.dim, *pol.k_quant, pol.k_gran, false, pol.block_kv)
                      : std::vector<double>(k.begin(), k.end());
  return out;
}

// fp32 bound for scores alpha (q^ . k^ + dS): the integer GEMM is exact in fp32 (|sum| < 2^24), and
// four roundings follow (the dequantized product, dS to fp32, their sum, the scaling by alpha).
inline AttentionErrorModel front_end_model(const HeadProblem& p, const FrontEnd& fe, int block_kv) {
  const double u = unit_roundoff(Format::fp32());
  double biggest = 0.0;
  for (std::int64_t r = 0; r < p.seq_q; ++r) {
    for (std::int64_t c = 0; c < p.seq_kv; ++c) {
      double dot = fe.ds.empty() ? 0.0 : std::fabs(fe.ds[c]);
      for (std::int64_t d = 0; d < p.dim; ++d) dot += std::fabs(fe.q[r * p.dim + d] * fe.k[c * p.dim + d]);
      biggest = std::max(biggest, dot);
    }
  }
  AttentionErrorModel m = uniform_model(u, block_kv, static_cast<double>(p.seq_kv), max_abs(p.v));
  m.score_err = 5.0 * u * *p.scale * biggest;
  m.score_range = 2.0 * *p.scale * biggest;
  return m;
}

// `policy_text` must keep S, softmax, P, P V and O in fp32 (no V quantizer, p_scale 1).
inline void check_front_end(std::uint64_t seed, const std::string& policy_text) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << policy_text);
  const HeadProblem p = biased_outlier_head(seed, 200, 300, 64);
  const Policy pol = parse_policy(policy_text);
  const FrontEnd fe = model_front_end(p, pol);
  const NaiveResult want = naive_attention(fe.q, fe.k, p.v, p.seq_q, p.seq_kv, p.dim, *p.scale, Mask::none, fe.ds);
  const HeadOutput got = run_head(p, pol);
  const AttentionErrorModel model = front_end_model(p, fe, pol.block_kv);
  EXPECT_LE(max_abs_diff(got.o, want.o), attention_output_bound(model));
  for (std::int64_t r = 0; r < p.seq_q; ++r) {
    const double lse = want.lse[r] + fe.lse_offset[r];
    // The offset is an fp64 dot product of the fp32 operands, itself good to a few fp64 ulps.
    ASSERT_NEAR(got.lse[r], lse, lse_bound(model, lse) + unit_roundoff(Format::fp32()) * std::fabs(fe.lse_offset[r]))
        << "row " << r;
  }
}

// Policies whose front end differs: both presets, every granularity, each smoothing on and off.
inline std::vector<std::string> front_end_policies() {
  const std::string fp32_rest = ",p=fp32,p_scale=1,v_quant=none,pv_acc=fp32";
  std::vector<std::string> out;
  for (const char* preset : {"sage8", "sage4"}) {
    const std::string base = preset + fp32_rest;
    out.push_back(base);
    for (const char* g : {"tensor", "block", "warp", "thread", "token"}) {
      out.push_back(base + ",q_gran=" + g + ",k_gran=" + g);
    }
    out.push_back(base + ",smooth_q=1,smooth_k=1");
    out.push_back(base + ",smooth_q=1,smooth_k=0");
    out.push_back(base + ",smooth_q=0,smooth_k=0");
  }
  return out;
}

// FP8 P with its static factor (p_scale = 448): one key per row scores about 0, the other 1023 score
// between -8.5 and -7.1, so their exponentials (2e-4 to 8e-4) lie below half of e4m3's smallest
// subnormal (2^-10): unscaled they would all round to zero and drop about half of each row's weight;
// scaled by 448 they are normal e4m3 numbers, good to 2^-4. One key block holds every key, so every
// row's P is measured against the same maximum whichever maximum the policy uses.
inline void check_p_scale(std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  HeadProblem p;
  p.seq_q = 32;
  p.seq_kv = 1024;
  p.dim = 1;
  p.scale = 1.0;
  for (std::int64_t r = 0; r < p.seq_q; ++r) p.q.push_back(static_cast<float>(uniform(rng, 1.0, 1.02)));
  for (std::int64_t c = 0; c < p.seq_kv; ++c) {
    const bool top = c == 0;
    p.k.push_back(static_cast<float>(top ? uniform(rng, -0.05, 0.05) : uniform(rng, -8.3, -7.1)));
    p.v.push_back(static_cast<float>(top ? uniform(rng, -1.0, -0.9) : uniform(rng, 0.5, 1.0)));
  }
  // The preset's P format and factor; every other point fp32 and unquantized.
  const Policy pol = parse_policy("sage8,q_quant=none,k_quant=none,smooth_k=0,v_quant=none,pv_acc=fp32,s2=1024");
  ASSERT_EQ(pol.p_scale, 448.0);
  const NaiveResult want = naive_attention(p.q, p.k, p.v, p.seq_q, p.seq_kv, 1, 1.0, Mask::none);
  const HeadOutput got = run_head(p, pol);
  const double u = unit_roundoff(Format::fp32());
  AttentionErrorModel m = uniform_model(u, pol.block_kv, static_cast<double>(p.seq_kv), max_abs(p.v));
  m.score_err = dot_score_error(1.0, u, 1.0, max_abs(p.q), max_abs(p.k));
  m.score_range = max_abs(p.q) * (max_abs(p.k) + 0.05);  // the top key (|k| < 0.05) to the lowest
  m.p_rel = unit_roundoff(pol.p);
  // Half the smallest e4m3 subnormal (2^-9), in units of P before the factor.
  m.p_abs = std::ldexp(1.0, pol.p.min_exponent() - pol.p.man_bits - 1) / pol.p_scale;
  EXPECT_LE(max_abs_diff(got.o, want.o), attention_output_bound(m));
}

}  // namespace pasa::test
