// SPDX-License-Identifier: Apache-2.0
#include "sage_study.h"

#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "host_attention.h"
#include "paper_study.h"
#include "pasa/attention.h"
#include "pasa/generators.h"
#include "pasa/metrics.h"
#include "pasa/policy.h"
#include "text/format.h"
#include "text/json.h"

namespace pasa::cli {
namespace {

struct Input {
  std::string name;
  QKV data;
  std::vector<double> reference;
};

struct Variant {
  std::string label, policy;
};

struct Table {
  std::string title, note;
  std::vector<Variant> variants;
};

std::vector<Table> tables() {
  return {
      {"Quantization granularity (the report's Tables 2/3)",
       "INT4 Q and K with smooth Q and K, FP8 P and V (sage4) at each granularity",
       {{"per-token", "sage4,q_gran=token,k_gran=token"},
        {"per-thread", "sage4,q_gran=thread,k_gran=thread"},
        {"per-warp", "sage4"},
        {"per-block", "sage4,q_gran=block,k_gran=block"},
        {"per-tensor", "sage4,q_gran=tensor,k_gran=tensor"}}},
      {"Data type of P and V (Tables 4/5)",
       "INT8 Q, K per thread with smooth K; P and V in each type (P scaled to the type's maximum)",
       {{"INT8", "sage8,p=int8,p_scale=127,v_quant=int8"},
        {"E5M2", "sage8,p=e5m2,p_scale=57344,v_quant=e5m2"},
        {"E4M3", "sage8"},
        {"FP16", "sage8,p=fp16,p_scale=1,v_quant=none,pv_acc=fp32"}}},
      {"Smooth V (Table 6)",
       "sage8 with an FP22 PV accumulator, one accumulator across blocks or two-level",
       {{"one FP22 accumulator", "sage8,two_level=0"},
        {"one FP22 accumulator + smooth V", "sage8,two_level=0,smooth_v=1"},
        {"two-level", "sage8"},
        {"two-level + smooth V", "sage8,smooth_v=1"}}},
      {"Smoothing ablation (Tables 9/10)",
       "INT4 Q, K per warp, FP8 P and V",
       {{"none", "sage4,smooth_q=0,smooth_k=0"},
        {"smooth K", "sage4,smooth_q=0"},
        {"smooth Q", "sage4,smooth_k=0"},
        {"smooth Q + K", "sage4"}}},
  };
}

}  // namespace

text::Json run_sage_study(const SageStudyConfig& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const Shape4 shape{1, cfg.heads, cfg.seq, 128};
  std::vector<Input> inputs;
  inputs.push_back({"normal", hybrid_qkv(shape, 0, 0, cfg.seed), {}});
  inputs.push_back({"uniform x0=1 Am=2", uniform_qkv(shape, 1, 2, cfg.seed + 1), {}});
  inputs.push_back({"hybrid x0=0 Am=10", hybrid_qkv(shape, 0, 10, cfg.seed + 2), {}});
  inputs.push_back({"channel outliers", outlier_qkv(shape, 4, 20, cfg.seed + 3), {}});
  inputs.push_back({"resonance (svd)", resonance_qkv(shape, resonance_preset("svd"), cfg.seed + 4), {}});
  for (Input& in : inputs) in.reference = reference_output(in.data);

  text::print("# pasa study sage: SageAttention2's accuracy tables on the CPU emulator\n\n");
  text::print("shape (1, {}, {}, 128), fp16 inputs, seed {}; each input plays the role of one layer. "
              "Metrics against fp64: CosSim, relative L1, RMSE (section 4) and relative RMSE (Eq. 19); "
              "average and worst over the inputs: {}.\n",
              cfg.heads, cfg.seq, cfg.seed, [&] {
               std::string s;
               for (const Input& in : inputs) s += (s.empty() ? "" : ", ") + in.name;
               return s;
              }());
  text::Json rows = text::Json::array();
  for (const Table& table : tables()) {
    text::print("\n### {}\n\n{}\n\n", table.title, table.note);
    text::print("| variant | CosSim avg | CosSim worst | rel. L1 avg | rel. L1 worst | RMSE avg | RMSE worst | "
                "rel. RMSE worst | worst input |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const Variant& v : table.variants) {
      double cos_sum = 0, l1_sum = 0, rmse_sum = 0;
      double cos_worst = 2, l1_worst = 0, rmse_worst = 0, rel_worst = 0;
      std::string worst_input;
      for (Input& in : inputs) {
        const ErrorMetrics m = compare(attention_output(in.data, parse_policy(v.policy)), in.reference);
        rows.push_back(text::Json::object({{"table", table.title}, {"variant", v.label}, {"policy", v.policy}, {"input", in.name},
                        {"cos_sim", m.cos_sim}, {"rel_l1", m.rel_l1}, {"rmse", m.rmse},
                        {"rel_rmse", m.rel_rmse}, {"nan_share", m.nan_share}}));
        cos_sum += m.cos_sim;
        l1_sum += m.rel_l1;
        rmse_sum += m.rmse;
        if (!(m.cos_sim >= cos_worst)) {
          cos_worst = m.cos_sim;
          worst_input = in.name;
        }
        l1_worst = std::max(l1_worst, m.rel_l1);
        rmse_worst = std::max(rmse_worst, m.rmse);
        rel_worst = std::max(rel_worst, m.rel_rmse);
      }
      const double n = static_cast<double>(inputs.size());
      text::print("| {} | {:.4f}% | {:.4f}% | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.3e} | {} |\n", v.label,
                  100 * cos_sum / n, 100 * cos_worst, l1_sum / n, l1_worst, rmse_sum / n, rmse_worst, rel_worst,
                  worst_input);
      text::print(text::progress_stream(), "[sage] {} / {} ({:.1f} s)\n", table.title, v.label, elapsed());
    }
  }

  // Which policies stay finite on the PASA paper's Table 4 inputs.
  text::print("\n### The PASA paper's Table 4 inputs: share of non-finite outputs (shape (1, {}, {}, 128))\n\n", cfg.heads, cfg.seq);
  const std::vector<std::string> policies = {"exact", "fa16_fp32", "pasa", "sage8", "sage4"};
  text::print("| input |");
  for (const auto& p : policies) text::print(" {} |", p);
  text::print("\n|---|");
  for (std::size_t i = 0; i < policies.size(); ++i) text::print("---|");
  text::print("\n");
  const std::vector<CaseGroup> groups = paper_case_groups();  // front(): the Table 4 cases
  for (const StudyCase& c : groups.front().cases) {
    QKV d = generate_case(c, Shape4{1, cfg.heads, cfg.seq, 128}, cfg.seed + 10);
    const std::vector<double> ref = reference_output(d);
    const std::string name = text::format("{} x0={:g} Am={:g}", c.dist, c.x0, c.am);
    text::print("| {} |", name);
    for (const auto& p : policies) {
      const ErrorMetrics m = compare(attention_output(d, parse_policy(p)), ref);
      rows.push_back(text::Json::object({{"table", "PASA Table 4 inputs"}, {"variant", p}, {"policy", p}, {"input", name},
                      {"cos_sim", m.cos_sim}, {"rel_l1", m.rel_l1}, {"rmse", m.rmse},
                      {"rel_rmse", m.rel_rmse}, {"nan_share", m.nan_share}}));
      text::print(" {:.2f}%{} |", 100 * m.nan_share,
                  m.nan_share == 0 ? text::format(" ({:.1e})", m.rel_rmse) : "");
    }
    text::print("\n");
    text::print(text::progress_stream(), "[sage] Table 4 inputs / {} ({:.1f} s)\n", name, elapsed());
  }
  text::print("\n(in parentheses: relative RMSE where the output is finite)\n\nstudy time {:.1f} s\n", elapsed());
  return rows;
}

}  // namespace pasa::cli
