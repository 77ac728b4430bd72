// SPDX-License-Identifier: Apache-2.0
#include "pasa/metrics.h"

#include <algorithm>
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
  // The sums run on the values over their largest magnitude, so that squares neither underflow (values
  // near 1e-200) nor overflow (near 1e200); the measures are ratios, but for rmse and max_abs, which
  // are scaled back.
  double top = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++bad;
      continue;
    }
    top = std::max({top, std::fabs(got[i]), std::fabs(ref[i])});
  }
  const double unit = top > 0 ? top : 1.0;
  double diff2 = 0, ref2 = 0, got2 = 0, dot = 0, diff1 = 0, ref1 = 0, max_abs = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) continue;
    const double g = got[i] / unit, r = ref[i] / unit, d = g - r;
    diff2 += d * d;
    diff1 += std::fabs(d);
    max_abs = std::max(max_abs, std::fabs(d));
    ref2 += r * r;
    ref1 += std::fabs(r);
    got2 += g * g;
    dot += g * r;
  }
  const double n = static_cast<double>(got.size());
  ErrorMetrics m{};
  m.nan_share = static_cast<double>(bad) / n;
  if (bad > 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    m.rel_rmse = m.cos_sim = m.rel_l1 = m.rmse = m.max_abs = nan;
    return m;
  }
  m.rel_rmse = ref2 > 0 ? std::sqrt(diff2 / ref2) : unit * std::sqrt(diff2);
  m.cos_sim = (got2 > 0 && ref2 > 0) ? dot / (std::sqrt(got2) * std::sqrt(ref2)) : (got2 == ref2 ? 1.0 : 0.0);
  m.rel_l1 = ref1 > 0 ? diff1 / ref1 : unit * diff1;
  m.rmse = unit * std::sqrt(diff2 / n);
  m.max_abs = unit * max_abs;
  return m;
}

}  // namespace pasa
