// SPDX-License-Identifier: Apache-2.0
// pasa/generators.h — seeded, reproducible synthetic Q/K/V: the PASA paper's random benchmarks and
// a "resonance" generator reproducing the overflow pattern the paper found in real models.
#pragma once

#include <cstdint>
#include <string>

#include "pasa/tensor.h"

namespace pasa {

struct Shape4 {
  std::int64_t batch = 1, heads = 2, seq = 1280, dim = 128;
};

struct QKV {
  HostTensor q, k, v;  // [B, H, S, D], C order
};

// Every generator throws pasa::Error for a dimension below 1, an unsupported dtype, a parameter out of
// its range, and a drawn value that is not finite in the dtype (a NaN or infinite parameter, or values
// beyond the dtype's range, e.g. am = 1e6 in f16); a shape too large for memory is a ResourceError.

// Eq. 17: Q, K, V ~ U(x0 - am, x0 + am).
QKV uniform_qkv(const Shape4& shape, double x0, double am, std::uint64_t seed, DType dtype = DType::f16);

// Eq. 18: Q, K, V ~ N(x0, 1) + N(0, am^2) * Bernoulli(p), p = 0.001 in the paper.
QKV hybrid_qkv(const Shape4& shape, double x0, double am, std::uint64_t seed, DType dtype = DType::f16,
               double p = 0.001);

// Resonance (the paper's section 3.3.2): every key carries the same oscillation along the head
// dimension, k_amp cos(2 pi d / period), plus a bias vector shared by every token (together: the large
// bias along the sequence) and per-token noise of k_noise. Each query oscillates 180 degrees out of
// phase with amplitude q_amp, or (with probability in_phase) in phase with amplitude q_amp_in_phase.
// Out-of-phase pairs give scores near -q_amp k_amp D/2 and in-phase ones near +q_amp_in_phase k_amp D/2:
// far beyond fp16's 65504 for the presets, while the shared part is what PASA's shift removes.
// V ~ N(0, 1).
struct ResonanceParams {
  double q_amp = 12.0, q_amp_in_phase = 1.5, k_amp = 300.0;  // oscillation amplitudes
  double q_bias = 4.0, k_bias = 100.0;  // scale of the bias vectors shared by all tokens
  double k_noise = 4.0;                 // per-token variation of K
  double in_phase = 0.1;                // share of queries in phase with the keys
  int period = 8;                       // oscillation period along D
};
// "qwen2" (K within a few hundred, scores ~[-2e5, 3e4], as the paper's Qwen2-7B) and "svd" (scores
// all strongly negative, ~[-9e4, -6e4], as SVD-img2vid); throws pasa::Error for other names.
ResonanceParams resonance_preset(const std::string& name);
QKV resonance_qkv(const Shape4& shape, const ResonanceParams& params, std::uint64_t seed,
                  DType dtype = DType::f16);

// Channel-wise outliers as SageAttention2 shows in real Q and K: N(0, 1) entries plus, in `channels`
// randomly chosen head-dim channels, a large same-signed offset (magnitude, with 10% spread) shared by
// every token; V gets a small per-channel bias. Smoothing K (and Q) removes exactly this structure.
QKV outlier_qkv(const Shape4& shape, int channels, double magnitude, std::uint64_t seed,
                DType dtype = DType::f16);

}  // namespace pasa
