// Score statistics of Q/K pairs: what FlashDecoding++'s calibration and the decode study measure.
#pragma once

#include <vector>

#include "pasa/tensor.h"

namespace pasa::cli {

// Every scaled score alpha q . k of the problem (GQA by head counts), non-causal, in fp64. With
// pasa_beta > 0 the scores are PASA's shifted ones: x - beta * (mean of x over the key's block of s2).
std::vector<double> scaled_scores(const HostTensor& q, const HostTensor& k, double pasa_beta = 0.0,
                                  int block = 128);

// The q-th quantile (0..1) of the values (sorted copy).
double quantile(std::vector<double> values, double q);

// FlashDecoding++'s calibration: the phi that centres the [0.01%, 99.99%] score range in the window.
struct PhiCalibration {
  double phi, lo, hi;  // phi and the score quantiles it was derived from
};
PhiCalibration calibrate_phi(const std::vector<double>& scores, double window_lo, double window_hi);

// Share of rows (of length row_len in `scores`) with some x - phi outside (window_lo, window_hi).
double leave_rate(const std::vector<double>& scores, std::size_t row_len, double phi, double window_lo,
                  double window_hi);

}  // namespace pasa::cli
