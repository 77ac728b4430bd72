// pasa calibrate: per-(layer, timestep) policy plans for adaptive mixing, and FlashDecoding++'s phi.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "commands.h"
#include "host_attention.h"
#include "pasa/attention.h"
#include "pasa/error.h"
#include "pasa/io.h"
#include "pasa/metrics.h"
#include "pasa/plan.h"
#include "score_stats.h"

namespace pasa::cli {
namespace {

struct CalibrateOptions {
  std::string inputs, fast = "sage4", accurate = "sage8", out;
  double xi = 30;
  bool phi = false;
};

struct Entry {
  std::string name;
  QKV data;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// NAME.safetensors with tensors q, k, v, or NAME_q.npy, NAME_k.npy, NAME_v.npy.
std::vector<Entry> load_entries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("--inputs: " + dir + " is not a directory");
  std::map<std::string, Entry> found;
  std::map<std::string, int> npy_parts;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) {
    const std::string file = path.filename().string();
    if (ends_with(file, ".safetensors")) {
      auto tensors = io::read_safetensors(path.string());
      for (const char* n : {"q", "k", "v"}) {
        if (!tensors.count(n)) throw Error(path.string() + ": no tensor named '" + n + "' (need q, k, v)");
      }
      const std::string name = file.substr(0, file.size() - 12);
      found[name] = Entry{name, {std::move(tensors["q"]), std::move(tensors["k"]), std::move(tensors["v"])}};
    } else if (ends_with(file, "_q.npy") || ends_with(file, "_k.npy") || ends_with(file, "_v.npy")) {
      const std::string name = file.substr(0, file.size() - 6);
      Entry& e = found[name];
      e.name = name;
      const char which = file[file.size() - 5];
      (which == 'q' ? e.data.q : which == 'k' ? e.data.k : e.data.v) = io::read_npy(path.string());
      npy_parts[name] += 1;
    }
  }
  for (const auto& [name, parts] : npy_parts) {
    if (parts != 3) throw Error("--inputs: " + name + " has " + std::to_string(parts) + " of its _q/_k/_v.npy files");
  }
  if (found.empty()) {
    throw Error("--inputs: " + dir + " holds no NAME.safetensors (q, k, v) or NAME_{q,k,v}.npy files");
  }
  std::vector<Entry> out;
  for (auto& [name, e] : found) out.push_back(std::move(e));
  return out;
}

void calibrate_plan(const CalibrateOptions& opt) {
  if (!(opt.xi >= 0 && opt.xi <= 100)) throw Error(fmt::format("--xi: {} is outside 0..100", opt.xi));
  if (opt.out.empty()) throw Error("--out: give the plan file to write");
  const Policy fast = parse_policy(opt.fast);
  parse_policy(opt.accurate);
  std::vector<Entry> entries = load_entries(opt.inputs);
  std::vector<std::pair<double, std::pair<int, int>>> ranked;
  std::map<std::pair<int, int>, double> scores;
  for (Entry& e : entries) {
    const auto key = parse_entry_name(e.name);
    ErrorMetrics m;
    try {
      m = compare(attention_output(e.data, fast), reference_output(e.data));
    } catch (const Error& err) {
      throw Error(opt.inputs + "/" + e.name + ": " + err.what());
    }
    // The report's score: CosSim * (1 - L1); a non-finite output is the worst possible.
    const double score = m.nan_share > 0 ? -1.0 : m.cos_sim * (1.0 - m.rel_l1);
    ranked.push_back({score, key});
    scores[key] = score;
    fmt::print(stderr, "{}: CosSim {:.5f}  L1 {:.4f}  score {:.5f}\n", e.name, m.cos_sim, m.rel_l1, score);
  }
  std::sort(ranked.begin(), ranked.end());
  const auto n_accurate = static_cast<std::size_t>(std::ceil(opt.xi / 100.0 * static_cast<double>(ranked.size()) - 1e-9));
  MixPlan plan{opt.fast, opt.accurate, opt.xi, {}};
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    plan.entries[ranked[i].second] = i < n_accurate ? opt.accurate : opt.fast;
  }
  save_plan(opt.out, plan, scores);
  fmt::print("{} entries: {} use {} (the worst {}%), {} use {}; wrote {}\n", ranked.size(), n_accurate,
             opt.accurate, opt.xi, ranked.size() - n_accurate, opt.fast, opt.out);
}

void calibrate_phi_command(const CalibrateOptions& opt) {
  std::vector<Entry> entries = load_entries(opt.inputs);
  std::vector<double> all;
  for (Entry& e : entries) {
    const std::vector<double> s = scaled_scores(e.data.q, e.data.k);
    all.insert(all.end(), s.begin(), s.end());
  }
  const Policy fdpp = preset_policy("fdpp");
  const PhiCalibration c = calibrate_phi(all, fdpp.window_lo, fdpp.window_hi);
  fmt::print("scaled scores of {} entries: 99.98% within [{:.4g}, {:.4g}]\n", entries.size(), c.lo, c.hi);
  fmt::print("phi = {:.6g} centres them in the window {} < x - phi < {}\n", c.phi, fdpp.window_lo, fdpp.window_hi);
  fmt::print("policy: fdpp,phi={:.6g}\n", c.phi);
  if (c.hi - c.lo >= fdpp.window_hi - fdpp.window_lo) {
    fmt::print("note: the score range is wider than the window: rows spanning it will be recomputed\n");
  }
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto opt = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Adaptive mixing: score each captured (layer, timestep) under the fast policy by "
                   "CosSim * (1 - L1) against fp64 and send the worst xi% to the accurate policy "
                   "(writes a plan); with --phi, derive FlashDecoding++'s unified max from score statistics.");
  cmd->add_option("--inputs", opt->inputs,
                  "directory of captured inputs: layer<L>[_t<T>].safetensors (q, k, v) or "
                  "layer<L>[_t<T>]_{q,k,v}.npy")->required();
  cmd->add_option("--fast", opt->fast, "policy for most entries")->capture_default_str();
  cmd->add_option("--accurate", opt->accurate, "policy for the worst entries")->capture_default_str();
  cmd->add_option("--xi", opt->xi, "percent of entries sent to the accurate policy (0..100)")->capture_default_str();
  cmd->add_option("--out", opt->out, "plan file to write (JSON)");
  cmd->add_flag("--phi", opt->phi, "derive phi for the fdpp policy instead of writing a plan");
  cmd->callback([opt] { opt->phi ? calibrate_phi_command(*opt) : calibrate_plan(*opt); });
}

}  // namespace pasa::cli
