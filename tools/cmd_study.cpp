// SPDX-License-Identifier: Apache-2.0
// pasa study: the PASA paper's random benchmarks on the CPU emulator, as markdown (and JSON, PNG).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "commands.h"
#include "ctrl_c.h"
#include "paper_study.h"
#include "decode_study.h"
#include "io/atomic_file.h"
#include "output_paths.h"
#include "pasa/error.h"
#include "pasa/policy.h"
#include "pasa/version.h"
#include "policy_options.h"
#include "sage_study.h"
#include "study_plot.h"
#include "text/format.h"
#include "text/json.h"

namespace pasa::cli {
namespace {

struct StudyOptions {
  bool full = false;
  std::string json, plot;
  std::vector<std::string> policies;
  std::uint64_t seed = 2024;
  std::int64_t seq = 1280;
  std::optional<std::int64_t> heads;  // default 2, or 16 with --full
};

// Study results as JSON, replacing the file whole or not at all.
void write_json(const std::string& path, const text::Json& rows) {
  if (path.empty()) return;
  write_checked_outputs([&] { io::detail::write_text_atomically(path, rows.dump(1) + "\n"); });
  text::print(text::progress_stream(), "wrote {}\n", path);
}

void write_plots(PlotKind kind, const text::Json& document, const std::string& directory) {
  if (directory.empty()) return;
  write_checked_outputs([&] {
    for (const auto& png : write_study_plots(kind, document.dump(), directory)) {
      text::print(text::progress_stream(), "wrote {}\n", png);
    }
  });
}

// The --plot directory a command made, removed again when the command fails after making it, or a
// signal ends it (if it is still empty: a folder of the user's, or anything written into it, is never
// removed).
class MadeFolder {
 public:
  explicit MadeFolder(std::string path)
      : path_(std::move(path)),
        on_signal_(path_.empty() ? nullptr : std::make_unique<io::detail::FolderRemovedOnSignal>(path_)) {}
  MadeFolder(MadeFolder&& other) noexcept
      : path_(std::exchange(other.path_, std::string())), on_signal_(std::move(other.on_signal_)) {}
  MadeFolder& operator=(MadeFolder&&) = delete;
  ~MadeFolder() {
    if (path_.empty() || std::uncaught_exceptions() == 0) return;
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }

 private:
  std::string path_;
  std::unique_ptr<io::detail::FolderRemovedOnSignal> on_signal_;
};

// Outputs are checked before a study that may run for minutes. The --plot directory is made first, so
// --json may name a file in it (not the figures' own results file, which the check refuses); the
// folder made is handed back, to be removed if the command fails.
[[nodiscard]] MadeFolder check_study_outputs(const std::string& json, const std::string& plot, PlotKind kind) {
  std::error_code ec;
  // The figures are the .png files the plot script writes in the --plot directory.
  if (!plot.empty() && !json.empty() && std::filesystem::path(json).extension() == ".png") {
    std::filesystem::path plot_dir = std::filesystem::absolute(plot);
    if (!plot_dir.has_filename()) plot_dir = plot_dir.parent_path();  // ("figures/")
    const auto json_dir = std::filesystem::weakly_canonical(std::filesystem::absolute(json).parent_path(), ec);
    if (!ec && json_dir == std::filesystem::weakly_canonical(plot_dir, ec) && !ec) {
      throw UsageError("--json: " + json + " is in the --plot directory, where the figures (.png files) are "
                       "written; give the results another name");
    }
  }
  // (a usage error, told before matplotlib is looked for: the check of the outputs below finds it too,
  // but only once the directory exists)
  if (!plot.empty() && !json.empty()) {
    const std::string results = plot_results_path(kind, plot);
    const auto a = std::filesystem::weakly_canonical(std::filesystem::absolute(json), ec);
    const auto b = std::filesystem::weakly_canonical(std::filesystem::absolute(results), ec);
    if (!ec && a == b) {
      throw UsageError("--plot: " + results + " (the results the figures are drawn from) is the same file as "
                       "--json; give --json another name");
    }
  }
  const bool made = !plot.empty() && prepare_plot_directory(plot);
  MadeFolder folder(made ? plot : std::string());
  check_output_files({}, {{"--json", json}, {"--plot", plot.empty() ? plot : plot_results_path(kind, plot)}});
  return folder;
}

std::string cell(const StudyRow& r) {
  if (r.rmse) return text::format("{:.3e}", *r.rmse);
  return text::format("NaN {:.2f}%", 100.0 * r.nan_share);
}

std::string number(double x) { return text::format("{:g}", x); }

// The tables of the rows there are; a case a stopped study did not reach reads "not run".
void print_tables(const std::vector<CaseGroup>& groups, const std::vector<StudyRow>& rows,
                  const std::vector<std::string>& policies, const std::string& v_law) {
  auto find = [&](const StudyCase& c, const std::string& policy) -> const StudyRow* {
    for (const StudyRow& r : rows) {
      if (r.c.dist == c.dist && r.c.x0 == c.x0 && r.c.am == c.am && r.policy == policy && r.v == v_law) return &r;
    }
    return nullptr;
  };
  for (const CaseGroup& g : groups) {
    text::print("\n### {}\n\n", g.title);
    if (g.axis.empty()) {  // Table 4: NaN shares next to the paper's, then RMSE
      std::string head = "| dist | x0 | Am | paper NaN (FA16-32) |", rule = "|---|---|---|---|";
      for (const auto& p : policies) {
        head += text::format(" {} NaN | {} RMSE |", p, p);
        rule += "---|---|";
      }
      text::print("{}\n{}\n", head, rule);
      for (const StudyCase& c : g.cases) {
        std::string line = text::format("| {} | {} | {} | {:.2f}% |", c.dist, number(c.x0), number(c.am),
                                        100.0 * paper_nan_share(c).value_or(0.0));
        for (const auto& p : policies) {
          const StudyRow* r = find(c, p);
          line += r == nullptr ? std::string(" not run | not run |")
                               : text::format(" {:.2f}% | {} |", 100.0 * r->nan_share,
                                              r->rmse ? text::format("{:.3e}", *r->rmse) : "-");
        }
        text::print("{}\n", line);
      }
      continue;
    }
    std::string head = text::format("| {} |", g.axis == "x0" ? "x0" : "Am"), rule = "|---|";
    for (const auto& p : policies) {
      head += text::format(" {} |", p);
      rule += "---|";
    }
    text::print("relative RMSE (Eq. 19) against fp64; 'NaN x%' where the output is not finite\n\n{}\n{}\n",
                head, rule);
    for (const StudyCase& c : g.cases) {
      std::string line = text::format("| {} |", number(g.axis == "x0" ? c.x0 : c.am));
      for (const auto& p : policies) {
        const StudyRow* r = find(c, p);
        line += text::format(" {} |", r == nullptr ? std::string("not run") : cell(*r));
      }
      text::print("{}\n", line);
    }
  }
}

text::Json to_json(const std::vector<StudyRow>& rows) {
  text::Json out = text::Json::array();
  for (const StudyRow& r : rows) {
    out.push_back(text::Json::object({{"dist", r.c.dist},
                   {"x0", r.c.x0},
                   {"am", r.c.am},
                   {"v", r.v},
                   {"policy", r.policy},
                   {"nan_share", r.nan_share},
                   {"rmse", r.rmse ? text::Json(*r.rmse) : text::Json(nullptr)}}));
  }
  return out;
}

// What a study's JSON holds: the pasa version, the study, the input shape, the seed and the policies
// next to the rows, so a file says how it was made.
text::Json study_document(const char* study, text::Json shape, std::uint64_t seed, const text::Json& rows) {
  std::vector<std::string> policies;
  for (const text::Json& row : rows.as_array()) {
    const std::string& policy = row.at("policy").as_string();
    if (std::find(policies.begin(), policies.end(), policy) == policies.end()) policies.push_back(policy);
  }
  return text::Json::object({{"pasa_version", version()}, {"study", study}, {"shape", std::move(shape)},
                             {"seed", seed}, {"policies", policies}, {"rows", rows}});
}

void run(const StudyOptions& opt) {
  StudyConfig config;
  if (opt.heads && *opt.heads < 1) {
    throw UsageError(text::format("--heads: {} is not a positive count", *opt.heads));
  }
  if (opt.seq < 1) throw UsageError(text::format("--seq: {} is not a positive length", opt.seq));
  // The policies as their canonical text (" exact" is exact); one given twice, in whatever words, would
  // be two equal columns.
  std::vector<Policy> parsed;
  std::vector<std::string> policies;
  for (const std::string& text : opt.policies) {
    const Policy policy = parse_policy_option("--policy", text);
    for (std::size_t j = 0; j < parsed.size(); ++j) {
      if (parsed[j] == policy) {
        throw UsageError("--policy: " + text + " is given twice (the same policy as " + opt.policies[j] + ")");
      }
    }
    parsed.push_back(policy);
    policies.push_back(to_string(policy));
  }
  const MadeFolder plot_folder = check_study_outputs(opt.json, opt.plot, PlotKind::paper_study);
  config.shape = Shape4{1, opt.heads.value_or(opt.full ? 16 : 2), opt.seq, 128};
  if (!policies.empty()) config.policies = policies;
  config.seed = opt.seed;

  const std::vector<CaseGroup> groups = paper_case_groups();
  std::vector<StudyCase> cases;  // distinct cases, in first-seen order
  std::set<std::tuple<std::string, double, double>> seen;
  for (const CaseGroup& g : groups)
    for (const StudyCase& c : g.cases)
      if (seen.insert({c.dist, c.x0, c.am}).second) cases.push_back(c);

  text::print("# pasa study: the PASA paper's random benchmarks on the CPU emulator\n\n");
  text::print("shape (B, H, S, D) = ({}, {}, {}, {}), fp16 inputs, seed {}, policies: {}\n",
              config.shape.batch, config.shape.heads, config.shape.seq, config.shape.dim, config.seed,
              text::join(config.policies, ", "));
  std::fflush(stdout);  // (what is being computed, seen before a long run and kept if it is killed)
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::vector<StudyRow> rows;
  int cases_done = 0;
  bool stopped = false;
  {
    const CtrlCStops ctrl_c;  // (a first Ctrl-C prints what finished; a second ends the process)
    try {
      run_study(cases, config, [&](int done, int total, const StudyCase& c) {
        cases_done = done;
        text::print(text::progress_stream(), "[{:2}/{}] {} x0={:g} Am={:g}  ({:.1f} s)\n", done, total, c.dist, c.x0, c.am,
                    elapsed());
      }, rows);
    } catch (const Interrupted&) {
      stopped = true;
    }
    stopped = stopped || ctrl_c.pressed();  // (a press after the last poll stops it too)
  }
  text::print("\n## V drawn like Q and K (the paper's Eq. 17 / 18)\n");
  print_tables(groups, rows, config.policies, "eq17");
  text::print("\n## Weight-sensitive: the same Q and K, V ~ N(0, 1)\n\n"
             "With V from Q's law, a large mean makes every output about x0 whatever the attention weights;\n"
             "with V ~ N(0, 1) the output moves with them, so these tables show the weights' errors.\n");
  print_tables(groups, rows, config.policies, "normal");
  text::print("\nstudy time {:.1f} s\n", elapsed());
  if (stopped) {
    std::vector<std::string> unwritten;
    if (!opt.json.empty()) unwritten.push_back("--json");
    if (!opt.plot.empty()) unwritten.push_back("--plot");
    const std::string done = text::format("interrupted (Ctrl-C) after {} of {} cases", cases_done, cases.size());
    const std::string files = unwritten.empty() ? "" : "; " + text::join(unwritten, ", ") + " not written";
    throw StoppedByCtrlC(done + ": their rows are above" + files, done + files);
  }

  const Shape4& sh = config.shape;
  const text::Json shape =
      text::Json::object({{"batch", sh.batch}, {"heads", sh.heads}, {"seq", sh.seq}, {"dim", sh.dim}});
  write_json(opt.json, study_document("paper", shape, config.seed, to_json(rows)));
  std::vector<StudyRow> paper_rows;  // the figures follow the paper: V drawn like Q and K
  for (const StudyRow& r : rows)
    if (r.v == "eq17") paper_rows.push_back(r);
  write_plots(PlotKind::paper_study, study_document("paper", shape, config.seed, to_json(paper_rows)), opt.plot);
}

}  // namespace

void add_study_command(Command& app) {
  auto opt = std::make_shared<StudyOptions>();
  Command* cmd = app.add_subcommand(
      "study",
      "Reproduce the PASA paper's random benchmarks on the CPU: Table 4 (NaN shares) and the "
      "Figure 9/10 RMSE sweeps under exact, fa16_fp32, fa16, pasa and pasa_accurate, with V drawn as "
      "the paper does and with V ~ N(0, 1) (weight-sensitive). No GPU needed.");
  cmd->add_flag("--full", opt->full, "the paper's shape (1, 16, 1280, 128) instead of (1, 2, 1280, 128)");
  cmd->add_option("--json", opt->json, "also write the results as JSON to this file");
  cmd->add_option("--plot", opt->plot,
                  "write PNG figures in the style of Figures 9 and 10 to this directory (made if missing "
                  "in an existing one; needs python3 with matplotlib): the runs with the paper's V only, "
                  "whose rows it also writes there as study.json (--json writes both V laws)");
  cmd->add_option("--policy", opt->policies, "a policy to compare (repeat the option for more: a comma separates a policy's overrides) (default: the five presets above)");
  cmd->add_option("--seed", opt->seed, "random seed of the inputs")->capture_default_str();
  cmd->add_option("--seq", opt->seq, "sequence length")->capture_default_str();
  cmd->add_option("--heads", opt->heads, "number of heads (default 2, or 16 with --full)");
  // Without a subcommand `pasa study` runs the PASA paper's study; `sage` and `decode` are the others.
  cmd->callback([opt, cmd] {
    if (cmd->get_subcommands().empty()) run(*opt);
  });

  auto sage = std::make_shared<SageStudyConfig>();
  auto sage_json = std::make_shared<std::string>();
  auto sage_plot = std::make_shared<std::string>();
  Command* sage_cmd = cmd->add_subcommand(
      "sage", "SageAttention2's accuracy tables: quantization granularity, P/V data type, smooth V, "
              "smoothing ablation, and which policies stay finite on the PASA paper's inputs.");
  sage_cmd->add_option("--seq", sage->seq, "sequence length")->capture_default_str();
  sage_cmd->add_option("--heads", sage->heads, "heads")->capture_default_str();
  sage_cmd->add_option("--seed", sage->seed, "random seed")->capture_default_str();
  sage_cmd->add_option("--json", *sage_json, "also write every measurement as JSON");
  sage_cmd->add_option("--plot", *sage_plot,
                       "write charts of 1 - CosSim per variant (average and worst input, log axis) "
                       "to this directory (made if missing in an existing one; needs python3 with "
                       "matplotlib)");
  sage_cmd->callback([sage, sage_json, sage_plot] {
    if (sage->heads < 1) throw UsageError(text::format("--heads: {} is not a positive count", sage->heads));
    if (sage->seq < 1) throw UsageError(text::format("--seq: {} is not a positive length", sage->seq));
    const MadeFolder plot_folder = check_study_outputs(*sage_json, *sage_plot, PlotKind::sage_study);
    const text::Json document = study_document(
        "sage", text::Json::object({{"batch", 1}, {"heads", sage->heads}, {"seq", sage->seq}, {"dim", 128}}),
        sage->seed, run_sage_study(*sage));
    write_json(*sage_json, document);
    write_plots(PlotKind::sage_study, document, *sage_plot);
  });

  auto decode = std::make_shared<DecodeStudyConfig>();
  auto decode_json = std::make_shared<std::string>();
  Command* decode_cmd = cmd->add_subcommand(
      "decode", "FlashDecoding++'s unified max on decode shapes: agreement with the synchronized "
                "algorithm and recompute rates with calibrated phi, phi = 0, and phi = 0 after PASA's shift.");
  decode_cmd->add_option("--seq-kv", decode->seq_kv, "KV cache length")->capture_default_str();
  decode_cmd->add_option("--batch", decode->batch, "batch")->capture_default_str();
  decode_cmd->add_option("--seed", decode->seed, "random seed")->capture_default_str();
  decode_cmd->add_option("--json", *decode_json, "also write the results as JSON");
  decode_cmd->callback([decode, decode_json] {
    if (decode->batch < 1) throw UsageError(text::format("--batch: {} is not a positive count", decode->batch));
    if (decode->seq_kv < 1) throw UsageError(text::format("--seq-kv: {} is not a positive length", decode->seq_kv));
    check_output_files({}, {{"--json", *decode_json}});
    const DecodeStudyConfig& c = *decode;
    write_json(*decode_json,
               study_document("decode",
                              text::Json::object({{"batch", c.batch}, {"heads_q", c.heads_q}, {"heads_kv", c.heads_kv},
                                                  {"seq_q", 1}, {"seq_kv", c.seq_kv}, {"dim", 128}}),
                              c.seed, run_decode_study(c)));
  });
}

}  // namespace pasa::cli
