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

struct StudyRow {
  StudyCase c;
  std::string policy;           // policy text as given (a preset name for the defaults)
  double nan_share;             // share of non-finite output elements, 0..1
  std::optional<double> rmse;   // relative RMSE (Eq. 19); empty when the output is not finite
};

struct StudyConfig {
  Shape4 shape{1, 2, 1280, 128};
  std::vector<std::string> policies{"exact", "fa16_fp32", "fa16", "pasa"};
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

// Runs every distinct case once under every policy (one fp64 reference per case); `progress` is
// called after each case with (done, total, case).
std::vector<StudyRow> run_study(const std::vector<StudyCase>& cases, const StudyConfig& config,
                                const std::function<void(int, int, const StudyCase&)>& progress);

}  // namespace pasa::cli
