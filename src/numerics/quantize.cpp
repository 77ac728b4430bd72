// SPDX-License-Identifier: Apache-2.0
#include "pasa/quantize.h"

#include <algorithm>
#include <cmath>

#include "interrupt.h"
#include "pasa/error.h"

namespace pasa {
namespace {

constexpr int kWarpRows = 16;   // rows of one warp's MMA tile (m16)
constexpr int kThreadRows = 8;  // a thread's fragment rows/columns repeat every 8

// The operand's values, the group size and the format, checked before anything is read.
void check_operand(const std::vector<float>& values, int rows, int cols, const Format& format) {
  if (rows < 0 || cols < 0 ||
      values.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols)) {
    throw Error("quantize: " + std::to_string(values.size()) + " values do not fill [rows, cols] = [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  check_format(format, "quantize: format");
}

// The index of [r, c] in a row-major [rows, cols] operand, in size_t: an int product overflows past
// 2^31 elements (2^25 keys of head dim 64).
std::size_t at(int r, int cols, int c) {
  return static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c);
}

// |x| for the scale's maximum; a value that is not finite has no scale that represents it (an
// infinity gives an infinite scale and NaN codes, a NaN would be passed over by the maximum).
double finite_magnitude(float x, int r, int c) {
  if (!std::isfinite(x)) {
    throw Error("quantize: the value at [" + std::to_string(r) + ", " + std::to_string(c) + "] is not finite (" +
                std::to_string(x) + ")");
  }
  return std::fabs(static_cast<double>(x));
}

}  // namespace

std::string granularity_name(Granularity g) {
  switch (g) {
    case Granularity::tensor: return "tensor";
    case Granularity::block: return "block";
    case Granularity::warp: return "warp";
    case Granularity::thread: return "thread";
    case Granularity::token: return "token";
  }
  return "?";
}

Granularity parse_granularity(std::string_view text) {
  for (Granularity g : {Granularity::tensor, Granularity::block, Granularity::warp, Granularity::thread,
                        Granularity::token}) {
    if (text == granularity_name(g)) return g;
  }
  throw Error("granularity '" + std::string(text) + "' is not tensor, block, warp, thread or token");
}

int quant_group(Granularity g, OperandRole role, int row, int block_rows) {
  if (block_rows < 1) throw Error("quantize: block size must be at least 1");
  if (row < 0) throw Error("quantize: row " + std::to_string(row) + " is negative");
  switch (g) {
    case Granularity::tensor: return 0;
    case Granularity::block: return row / block_rows;
    case Granularity::warp: return role == OperandRole::query ? row / kWarpRows : row / block_rows;
    case Granularity::thread:
      if (role == OperandRole::query) return (row / kWarpRows) * kThreadRows + row % kThreadRows;
      return (row / block_rows) * kThreadRows + row % kThreadRows;
    case Granularity::token: return row;
  }
  throw Error("quantize: granularity " + std::to_string(static_cast<int>(g)) + " is not one of Granularity's values");
}

std::vector<double> quantize_rows(std::vector<float>& values, int rows, int cols, const Format& format,
                                  Granularity granularity, OperandRole role, int block_rows) {
  if (block_rows < 1) throw Error("quantize: block size must be at least 1");
  check_operand(values, rows, cols, format);
  const Format target = saturating(format);
  const double qmax = target.max_finite();
  std::vector<int> group(static_cast<std::size_t>(rows));
  int groups = 0;
  for (int r = 0; r < rows; ++r) {
    group[r] = quant_group(granularity, role, r, block_rows);
    groups = std::max(groups, group[r] + 1);
  }
  std::vector<double> group_max(static_cast<std::size_t>(groups), 0.0);
  for (int r = 0; r < rows; ++r) {
    if (r % kRowsPerPoll == 0) poll_interrupt();
    double& m = group_max[group[r]];
    for (int c = 0; c < cols; ++c) m = std::max(m, finite_magnitude(values[at(r, cols, c)], r, c));
  }
  std::vector<double> scale(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    if (r % kRowsPerPoll == 0) poll_interrupt();
    const double delta = group_max[group[r]] / qmax;
    scale[r] = delta;
    for (int c = 0; c < cols; ++c) {
      float& x = values[at(r, cols, c)];
      x = delta == 0.0 ? 0.0f : static_cast<float>(round_to(target, x / delta));
    }
  }
  return scale;
}

std::vector<double> quantize_columns(std::vector<float>& values, int rows, int cols, const Format& format) {
  check_operand(values, rows, cols, format);
  const Format target = saturating(format);
  const double qmax = target.max_finite();
  std::vector<double> scale(static_cast<std::size_t>(cols), 0.0);
  for (int r = 0; r < rows; ++r) {
    if (r % kRowsPerPoll == 0) poll_interrupt();
    for (int c = 0; c < cols; ++c) scale[c] = std::max(scale[c], finite_magnitude(values[at(r, cols, c)], r, c));
  }
  for (double& s : scale) s /= qmax;
  for (int r = 0; r < rows; ++r) {
    if (r % kRowsPerPoll == 0) poll_interrupt();
    for (int c = 0; c < cols; ++c) {
      float& x = values[at(r, cols, c)];
      x = scale[c] == 0.0 ? 0.0f : static_cast<float>(round_to(target, x / scale[c]));
    }
  }
  return scale;
}

}  // namespace pasa
