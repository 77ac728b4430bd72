// SPDX-License-Identifier: Apache-2.0
#include "paper_study.h"

#include <cmath>
#include <map>

#include "host_attention.h"
#include "pasa/attention.h"
#include "pasa/error.h"
#include "pasa/metrics.h"
#include "pasa/policy.h"
#include "stage.h"
#include "text/format.h"

namespace pasa::cli {

std::vector<CaseGroup> paper_case_groups() {
  std::vector<CaseGroup> groups;
  groups.push_back({"Table 4", "",
                    {{"uniform", 30, 0.5}, {"uniform", 20, 15}, {"uniform", 20, 20},
                     {"hybrid", 30, 10}, {"hybrid", 20, 50}, {"hybrid", 20, 100}}});
  CaseGroup u_mean{"Figure 9a: uniform, Am = 0.5, growing mean", "x0", {}};
  CaseGroup h_mean{"Figure 10a: hybrid, Am = 10, growing mean", "x0", {}};
  for (double x0 = 0; x0 <= 30; x0 += 5) {
    u_mean.cases.push_back({"uniform", x0, 0.5});
    h_mean.cases.push_back({"hybrid", x0, 10});
  }
  CaseGroup u_amp{"Figure 9b: uniform, x0 = 20, growing amplitude", "am", {}};
  for (double am : {0.5, 5.0, 10.0, 15.0, 20.0}) u_amp.cases.push_back({"uniform", 20, am});
  CaseGroup h_amp{"Figure 10b: hybrid, x0 = 20, growing amplitude", "am", {}};
  for (double am : {10.0, 25.0, 50.0, 75.0, 100.0}) h_amp.cases.push_back({"hybrid", 20, am});
  groups.push_back(u_mean);
  groups.push_back(u_amp);
  groups.push_back(h_mean);
  groups.push_back(h_amp);
  return groups;
}

std::optional<double> paper_nan_share(const StudyCase& c) {
  static const std::map<std::tuple<std::string, double, double>, double> table4 = {
      {{"uniform", 30, 0.5}, 1.0},   {{"uniform", 20, 15}, 0.0012}, {{"uniform", 20, 20}, 0.0814},
      {{"hybrid", 30, 10}, 1.0},     {{"hybrid", 20, 50}, 0.0004},  {{"hybrid", 20, 100}, 0.0111}};
  if (auto it = table4.find({c.dist, c.x0, c.am}); it != table4.end()) return it->second;
  return std::nullopt;
}

QKV generate_case(const StudyCase& c, const Shape4& shape, std::uint64_t seed) {
  if (c.dist == "uniform") return uniform_qkv(shape, c.x0, c.am, seed, DType::f16);
  if (c.dist == "hybrid") return hybrid_qkv(shape, c.x0, c.am, seed, DType::f16);
  throw Error("study: unknown distribution '" + c.dist + "'");
}

void run_study(const std::vector<StudyCase>& cases, const StudyConfig& config,
               const std::function<void(int, int, const StudyCase&)>& progress, std::vector<StudyRow>& rows) {
  std::vector<Policy> policies;
  for (const auto& text : config.policies) policies.push_back(parse_policy(text));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::vector<StudyRow> case_rows;
    const StudyCase& c = cases[i];
    // (a case of a large --seq or --heads runs for minutes: it says so on stderr while it runs)
    const StageHeartbeat heartbeat(text::format("case {}/{} ({} x0={:g} Am={:g})", i + 1, cases.size(), c.dist,
                                                c.x0, c.am));
    // Each case gets its own seed so adding a case does not change the others' inputs.
    const std::uint64_t seed = config.seed + 1000003ull * i;
    QKV data = generate_case(c, config.shape, seed);
    for (const std::string& law : v_laws()) {
      if (law == "normal") data.v = hybrid_qkv(config.shape, 0.0, 0.0, seed + 1).v;  // N(0, 1)
      const std::vector<double> ref = reference_output(data);  // fp64 on the fp16 inputs
      for (std::size_t p = 0; p < policies.size(); ++p) {
        const ErrorMetrics m = compare(attention_output(data, policies[p]), ref);
        StudyRow row{c, law, config.policies[p], m.nan_share, std::nullopt};
        if (m.nan_share == 0.0) row.rmse = m.rel_rmse;
        case_rows.push_back(row);
      }
    }
    rows.insert(rows.end(), case_rows.begin(), case_rows.end());
    if (progress) progress(static_cast<int>(i + 1), static_cast<int>(cases.size()), c);
  }
}

}  // namespace pasa::cli
