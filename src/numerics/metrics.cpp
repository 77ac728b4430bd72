// SPDX-License-Identifier: Apache-2.0
#include "pasa/metrics.h"

#include <cmath>
#include <limits>

#include "pasa/error.h"
#include "text/format.h"

namespace pasa {

ErrorMetrics compare(const std::vector<double>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size() || got.empty()) {
    throw Error("compare: outputs of different sizes or empty");
  }
  // The reference is the yardstick: a non-finite value there leaves no error to measure (a NaN would be
  // skipped by the maximum and report a finite max_abs), so it is the caller's error, not a result.
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) {
      throw Error(text::format("compare: the reference holds {} at index {} of {}; errors are measured "
                               "against a finite reference only", ref[i], i, ref.size()));
    }
  }
  double diff2 = 0, ref2 = 0, got2 = 0, dot = 0, diff1 = 0, ref1 = 0, max_abs = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++bad;
      continue;
    }
    const double d = got[i] - ref[i];
    diff2 += d * d;
    diff1 += std::fabs(d);
    max_abs = std::max(max_abs, std::fabs(d));
    ref2 += ref[i] * ref[i];
    ref1 += std::fabs(ref[i]);
    got2 += got[i] * got[i];
    dot += got[i] * ref[i];
  }
  const double n = static_cast<double>(got.size());
  ErrorMetrics m{};
  m.nan_share = static_cast<double>(bad) / n;
  if (bad > 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    m.rel_rmse = m.cos_sim = m.rel_l1 = m.rmse = m.max_abs = nan;
    return m;
  }
  m.rel_rmse = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  m.cos_sim = (got2 > 0 && ref2 > 0) ? dot / std::sqrt(got2 * ref2) : (got2 == ref2 ? 1.0 : 0.0);
  m.rel_l1 = ref1 > 0 ? diff1 / ref1 : diff1;
  m.rmse = std::sqrt(diff2 / n);
  m.max_abs = max_abs;
  return m;
}

}  // namespace pasa
