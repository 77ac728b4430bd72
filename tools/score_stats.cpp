// SPDX-License-Identifier: Apache-2.0
#include "score_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "io/byte_io.h"
#include "pasa/error.h"
#include "text/format.h"

namespace pasa::cli {

namespace {

// Buckets: the top 20 bits of a double's order-preserving key (sign, 11 exponent bits, 8 fraction bits).
constexpr int kBucketBits = 20;

std::uint64_t order_key(double x) {  // monotone in x: negatives flipped whole, positives get the sign bit
  std::uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits >> 63) != 0 ? ~bits : bits | (std::uint64_t{1} << 63);
}

double from_order_key(std::uint64_t key) {
  const std::uint64_t bits = (key >> 63) != 0 ? key & ~(std::uint64_t{1} << 63) : ~key;
  double x = 0;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

void check_finite(const HostTensor& t, const char* name) {
  const std::vector<float> values = to_float(t);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw Error(text::format("{}: non-finite value {} at flat index {} (inputs must be finite)", name,
                              values[i], i));
    }
  }
}

}  // namespace

void for_each_score_row(const HostTensor& q, const HostTensor& k, double pasa_beta, int block,
                        const std::function<void(std::span<const double>)>& emit, const CallOptions& call) {
  if (q.shape.size() != 4 || k.shape.size() != 4 || q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3] ||
      k.shape[1] == 0 || q.shape[1] % k.shape[1] != 0) {
    throw Error(text::format("scores: q {} and k {} do not form an attention problem ([B, H, S, D], same batch and "
                             "head dim, H_q a multiple of H_kv)", io::detail::shape_text(q.shape), io::detail::shape_text(k.shape)));
  }
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&k, "k"}}) {
    for (int i = 0; i < 4; ++i) {
      if (t->shape[i] < 1) {  // (no scores: a phi of none, or rows of no keys)
        throw Error(text::format("scores: {} has shape [{}, {}, {}, {}]: every size must be at least 1", name,
                                 t->shape[0], t->shape[1], t->shape[2], t->shape[3]));
      }
    }
  }
  check_finite(q, "q");
  check_finite(k, "k");
  const std::vector<float> qf = to_float(q), kf = to_float(k);
  const std::int64_t B = q.shape[0], Hq = q.shape[1], Hkv = k.shape[1], Sq = q.shape[2], Skv = k.shape[2],
                     D = q.shape[3];
  const double alpha = call.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  const std::int64_t diagonal = call.alignment == CausalAlignment::bottom_right ? Skv - Sq : 0;
  std::vector<double> row(static_cast<std::size_t>(Skv));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h) {
      const float* kh = &kf[static_cast<std::size_t>((b * Hkv + h / (Hq / Hkv)) * Skv * D)];
      for (std::int64_t r = 0; r < Sq; ++r) {
        const float* qr = &qf[static_cast<std::size_t>(((b * Hq + h) * Sq + r) * D)];
        for (std::int64_t c = 0; c < Skv; ++c) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kh[c * D + d];
          row[c] = alpha * dot;
        }
        if (pasa_beta > 0) {
          for (std::int64_t k0 = 0; k0 < Skv; k0 += block) {
            const std::int64_t k1 = std::min<std::int64_t>(k0 + block, Skv);
            double mean = 0;
            for (std::int64_t c = k0; c < k1; ++c) mean += row[c];
            mean /= static_cast<double>(k1 - k0);
            for (std::int64_t c = k0; c < k1; ++c) row[c] -= pasa_beta * mean;
          }
        }
        const std::int64_t seen = call.causal ? std::clamp<std::int64_t>(r + diagonal + 1, 0, Skv) : Skv;
        if (seen > 0) emit(std::span<const double>(row).first(static_cast<std::size_t>(seen)));
      }
    }
}

std::vector<double> scaled_scores(const HostTensor& q, const HostTensor& k, double pasa_beta, int block) {
  std::vector<double> out;
  for_each_score_row(q, k, pasa_beta, block, [&](std::span<const double> row) {
    out.insert(out.end(), row.begin(), row.end());
  });
  return out;
}

ScoreHistogram::ScoreHistogram() : buckets_(std::size_t{1} << kBucketBits, 0) {}

void ScoreHistogram::add(std::span<const double> scores) {
  for (const double x : scores) {
    if (!std::isfinite(x)) throw Error(text::format("scores: a non-finite score ({}) cannot be calibrated", x));
    ++buckets_[order_key(x) >> (64 - kBucketBits)];
  }
  count_ += scores.size();
}

double ScoreHistogram::quantile(double q) const {
  if (count_ == 0) throw Error("quantile of no values");
  // The same rank as quantile(vector): floor(q * (n - 1)), 0-based.
  const auto rank = static_cast<std::uint64_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_ - 1));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen > rank) {
      const std::uint64_t lo = std::uint64_t{i} << (64 - kBucketBits);
      const std::uint64_t hi = lo | ((std::uint64_t{1} << (64 - kBucketBits)) - 1);
      return 0.5 * (from_order_key(lo) + from_order_key(hi));
    }
  }
  throw Error("quantile: internal count mismatch");
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) throw Error("quantile of no values");
  const auto idx = static_cast<std::size_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(idx), values.end());
  return values[idx];
}

namespace {

PhiCalibration centre_in_window(double lo, double hi, double window_lo, double window_hi) {
  return {0.5 * (lo + hi) - 0.5 * (window_lo + window_hi), lo, hi};
}

}  // namespace

PhiCalibration calibrate_phi(const std::vector<double>& scores, double window_lo, double window_hi) {
  return centre_in_window(quantile(scores, 0.0001), quantile(scores, 0.9999), window_lo, window_hi);
}

PhiCalibration calibrate_phi(const ScoreHistogram& scores, double window_lo, double window_hi) {
  return centre_in_window(scores.quantile(0.0001), scores.quantile(0.9999), window_lo, window_hi);
}

double leave_rate(const std::vector<double>& scores, std::size_t row_len, double phi, double window_lo,
                  double window_hi) {
  std::size_t rows = scores.size() / row_len, left = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < row_len; ++c) {
      const double x = scores[r * row_len + c] - phi;
      if (!(x > window_lo && x < window_hi)) {
        ++left;
        break;
      }
    }
  }
  return rows == 0 ? 0.0 : static_cast<double>(left) / static_cast<double>(rows);
}

}  // namespace pasa::cli
