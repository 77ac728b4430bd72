// SPDX-License-Identifier: Apache-2.0
// Score statistics of Q/K pairs: what FlashDecoding++'s calibration and the decode study measure.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "host_attention.h"
#include "pasa/tensor.h"

namespace pasa::cli {

// Calls `row` with each query row's scaled scores alpha q . k (GQA by head counts) in fp64, alpha the
// call's scale (1 / sqrt(D) without one); one row of S_kv scores is held at a time. A causal call's
// row holds the keys its query sees (those up to its diagonal; none: no call). With pasa_beta > 0 the
// scores are PASA's shifted ones: x - beta * (mean of x over the key's block of s2). Throws
// pasa::Error when q or k holds a non-finite value.
void for_each_score_row(const HostTensor& q, const HostTensor& k, double pasa_beta, int block,
                        const std::function<void(std::span<const double>)>& row, const CallOptions& call = {});

// Every score of for_each_score_row, in one vector (for problems that fit in memory).
std::vector<double> scaled_scores(const HostTensor& q, const HostTensor& k, double pasa_beta = 0.0,
                                  int block = 128);

// The q-th quantile (0..1) of the values (sorted copy).
double quantile(std::vector<double> values, double q);

// Quantiles of a stream of scores in bounded memory (8 MiB, whatever the count): each finite double
// falls in a bucket named by its sign, exponent and leading 8 fraction bits, so a quantile is known to
// within a relative 2^-9 of the value (the bucket's midpoint is returned). Calibrating phi from a
// many-layer capture needs this: every score as a double would not fit.
class ScoreHistogram {
 public:
  ScoreHistogram();
  void add(std::span<const double> scores);  // throws pasa::Error on a non-finite score
  std::uint64_t count() const { return count_; }
  double quantile(double q) const;  // q in 0..1; throws pasa::Error when empty

 private:
  std::vector<std::uint64_t> buckets_;
  std::uint64_t count_ = 0;
};

// FlashDecoding++'s calibration: the phi that centres the [0.01%, 99.99%] score range in the window.
struct PhiCalibration {
  double phi, lo, hi;  // phi and the score quantiles it was derived from
};
PhiCalibration calibrate_phi(const std::vector<double>& scores, double window_lo, double window_hi);
PhiCalibration calibrate_phi(const ScoreHistogram& scores, double window_lo, double window_hi);

// Share of rows (of length row_len in `scores`) with some x - phi outside (window_lo, window_hi).
double leave_rate(const std::vector<double>& scores, std::size_t row_len, double phi, double window_lo,
                  double window_hi);

}  // namespace pasa::cli
