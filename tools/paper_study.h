// SPDX-License-Identifier: Apache-2.0
// The PASA paper's random benchmarks (Table 4, Figures 9 and 10) run on the CPU emulator.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pasa/generators.h"

namespace pasa::cli {

struct StudyCase {
  std::string dist;  // "uniform" (Eq. 17) or "hybrid" (Eq. 18)
  double x0, am;
};

// The law of V: "eq17" draws V like Q and K (the paper's Eq. 17 / 18), so that at a large mean every
// output is about x0 whatever the attention weights; "normal" keeps Q and K and draws V ~ N(0, 1), so
// that the output moves with the weights.
inline const std::vector<std::string>& v_laws() {
  static const std::vector<std::string> laws{"eq17", "normal"};
  return laws;
}

struct StudyRow {
  StudyCase c;
  std::string v;                // the law of V: "eq17" or "normal"
  std::string policy;           // policy text as given (a preset name for the defaults)
  double nan_share;             // share of non-finite output elements, 0..1
  std::optional<double> rmse;   // relative RMSE (Eq. 19); empty when the output is not finite
};

struct StudyConfig {
  Shape4 shape{1, 2, 1280, 128};
  std::vector<std::string> policies{"exact", "fa16_fp32", "fa16", "pasa", "pasa_accurate"};
  std::uint64_t seed = 2024;
};

// A named list of cases: the Table 4 cases and the four sweeps of Figures 9/10.
struct CaseGroup {
  std::string title;
  std::string axis;  // "x0" or "am": what the sweep varies
  std::vector<StudyCase> cases;
};
std::vector<CaseGroup> paper_case_groups();

// The fp16 Q, K, V of a case (Eq. 17 or 18).
QKV generate_case(const StudyCase& c, const Shape4& shape, std::uint64_t seed);

// The paper's NaN share of FA(FP16-FP32) for a Table 4 case (Ascend NPU), if it is one.
std::optional<double> paper_nan_share(const StudyCase& c);

// Runs every distinct case under every policy, once for each law of V (one fp64 reference per case
// and law), appending each case's rows to `rows` once the case is done; `progress` is called after
// each case with (done, total, case). An exception (pasa::Interrupted: Ctrl-C) leaves `rows` with the
// cases finished before it.
void run_study(const std::vector<StudyCase>& cases, const StudyConfig& config,
               const std::function<void(int, int, const StudyCase&)>& progress, std::vector<StudyRow>& rows);

}  // namespace pasa::cli
