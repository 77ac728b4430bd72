// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the CPU tests: fresh random tensors, error metrics against the fp64 reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "pasa/attention.h"
#include "pasa/error.h"
#include "pasa/generators.h"
#include "storage_convert.h"

namespace pasa::test {

// A seed that differs every run: for names of scratch files and inputs whose checks cannot fail on
// any draw. A bound or a NaN count is asserted on kFixedSeeds instead.
inline std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// Fixed seeds for assertions of a bound or of zero NaN: the same data every run, so a failure
// replays (tests print the seed through SCOPED_TRACE); the slow sweep runs the same checks on many.
inline constexpr std::uint64_t kFixedSeeds[] = {2024, 7, 1013};

// Uniform in [lo, hi) from the top 53 bits of one draw. std::uniform_real_distribution's algorithm is
// each standard library's own; this mapping gives the same numbers everywhere for a seed.
inline double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * std::ldexp(static_cast<double>(rng() >> 11), -53);
}

// An owning host tensor with a [B, H, S, D] view in the requested layout.
struct Tensor4 {
  std::vector<std::uint8_t> bytes;
  TensorView view;
};

inline Tensor4 make_tensor(std::int64_t B, std::int64_t H, std::int64_t S, std::int64_t D, DType dtype,
                           bool bshd = false) {
  Tensor4 t;
  t.bytes.resize(static_cast<std::size_t>(B * H * S * D) * dtype_size(dtype));
  t.view = bshd ? bshd_view(t.bytes.data(), dtype, B, S, H, D) : bhsd_view(t.bytes.data(), dtype, B, H, S, D);
  return t;
}

inline Tensor4 random_tensor(std::int64_t B, std::int64_t H, std::int64_t S, std::int64_t D,
                             std::mt19937_64& rng, DType dtype = DType::f32, bool bshd = false,
                             double lo = -1.0, double hi = 1.0) {
  Tensor4 t = make_tensor(B, H, S, D, dtype, bshd);
  for (std::int64_t i = 0; i < B * H * S * D; ++i) store_from_double(t.bytes.data(), dtype, i, uniform(rng, lo, hi));
  return t;
}

// Fill with a NaN pattern so an unwritten element cannot pass as a result.
inline void poison(Tensor4& t) {
  for (std::int64_t i = 0; i < t.view.numel(); ++i) {
    store_from_double(t.bytes.data(), t.view.dtype, i, std::nan(""));
  }
}

// The output in [B, H, S, D] order as doubles.
inline std::vector<double> read_bhsd(const TensorView& t) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(t.numel()));
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t h = 0; h < t.shape[1]; ++h)
      for (std::int64_t s = 0; s < t.shape[2]; ++s)
        for (std::int64_t d = 0; d < t.shape[3]; ++d)
          out.push_back(load_as_float(t.data, t.dtype, t.offset(b, h, s, d)));
  return out;
}

// Q, K, V ~ N(0, 1) in fp16 ([1, 1, S, D], hybrid_qkv's draw) with channel 3 of Q and K at c in every
// token: an outlier channel shared by Q and K, as LLMs have.
inline QKV outlier_channel_qkv(std::int64_t S, std::int64_t D, float c, std::uint64_t seed) {
  QKV data = hybrid_qkv({1, 1, S, D}, 0.0, 0.0, seed, DType::f16);
  std::vector<float> q = to_float(data.q), k = to_float(data.k);
  for (std::int64_t t = 0; t < S; ++t) q[static_cast<std::size_t>(t * D + 3)] = k[static_cast<std::size_t>(t * D + 3)] = c;
  data.q = from_float(q, {1, 1, S, D}, DType::f16);
  data.k = from_float(k, {1, 1, S, D}, DType::f16);
  return data;
}

// ||x - ref|| / ||ref|| (Eq. 19); NaN if x holds a non-finite value.
inline double relative_rmse(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return std::nan("");
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Runs `body`, expecting a pasa::Error whose message contains `needle`.
template <typename F>
void expect_error(F&& body, const std::string& needle) {
  try {
    body();
    ADD_FAILURE() << "expected pasa::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

}  // namespace pasa::test
