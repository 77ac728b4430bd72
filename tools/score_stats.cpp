#include "score_stats.h"

#include <algorithm>
#include <cmath>

#include "pasa/error.h"

namespace pasa::cli {

std::vector<double> scaled_scores(const HostTensor& q, const HostTensor& k, double pasa_beta, int block) {
  if (q.shape.size() != 4 || k.shape.size() != 4 || q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3] ||
      k.shape[1] == 0 || q.shape[1] % k.shape[1] != 0) {
    throw Error("scores: q and k do not form an attention problem ([B, H, S, D], H_q a multiple of H_kv)");
  }
  const std::vector<float> qf = to_float(q), kf = to_float(k);
  const std::int64_t B = q.shape[0], Hq = q.shape[1], Hkv = k.shape[1], Sq = q.shape[2], Skv = k.shape[2],
                     D = q.shape[3];
  const double alpha = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(B * Hq * Sq * Skv));
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
        out.insert(out.end(), row.begin(), row.end());
      }
    }
  return out;
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) throw Error("quantile of no values");
  const auto idx = static_cast<std::size_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(idx), values.end());
  return values[idx];
}

PhiCalibration calibrate_phi(const std::vector<double>& scores, double window_lo, double window_hi) {
  PhiCalibration c{};
  c.lo = quantile(scores, 0.0001);
  c.hi = quantile(scores, 0.9999);
  c.phi = 0.5 * (c.lo + c.hi) - 0.5 * (window_lo + window_hi);
  return c;
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
