// SPDX-License-Identifier: Apache-2.0
// pasa calibrate: per-(layer, timestep) policy plans for adaptive mixing, and FlashDecoding++'s phi.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_checks.h"
#include "commands.h"
#include "capture_index.h"
#include "host_attention.h"
#include "io/atomic_file.h"
#include "pasa/attention.h"
#include "pasa/error.h"
#include "pasa/io.h"
#include "pasa/metrics.h"
#include "pasa/plan.h"
#include "output_paths.h"
#include "policy_options.h"
#include "score_stats.h"
#include "stage.h"
#include "text/format.h"

namespace pasa::cli {
namespace {

struct CalibrateOptions {
  std::string inputs, fast = "sage4", accurate = "sage8", out;
  double xi = 30;
  bool phi = false;
};

// One captured (layer, timestep): its name, the key parsed from it, its files (one .safetensors
// with q, k, v, or three .npy files), loaded only when it is processed, and the call's options (from
// the capture's index.json; defaults without one).
struct EntryFiles {
  std::string name;
  std::pair<int, int> key;
  std::string safetensors;
  std::string npy[3];  // q, k, v
  CallOptions call;
  bool masked = false;  // the captured call had an attn_mask, which the capture did not keep

  std::vector<std::string> paths() const {
    if (!safetensors.empty()) return {safetensors};
    return {npy[0], npy[1], npy[2]};
  }
};


// The (layer, timestep) keys of a directory's entries, each named once: parse_entry_name's, with two
// names for one key ("layer1" and "layer01") refused.
class EntryKeys {
 public:
  std::pair<int, int> add(const std::string& name) {
    std::pair<int, int> key;
    try {
      key = parse_entry_name(name);
    } catch (const Error& err) {
      throw Error("--inputs: " + std::string(err.what()));
    }
    if (const auto [it, fresh] = names_.emplace(key, name); !fresh) {
      throw Error("--inputs: " + it->second + " and " + name + " name the same layer and timestep");
    }
    return key;
  }

 private:
  std::map<std::pair<int, int>, std::string> names_;
};

// The calls a capture's index.json lists (pasa.capture's directories), each NAME.safetensors with its
// causal flag, alignment and scale; the directory's other tensor files (an earlier capture's, left by
// overwrite=True) are not scored, and said so.
std::vector<EntryFiles> indexed_entries(const std::string& dir, const std::vector<CapturedCall>& calls,
                                        std::size_t files_found) {
  std::vector<EntryFiles> out;
  EntryKeys keys;
  for (const CapturedCall& c : calls) {
    if (c.file != c.name + ".safetensors") {
      throw Error("--inputs: " + dir + "/index.json: entry " + c.name + " names the file '" + c.file +
                  "', not " + c.name + ".safetensors");
    }
    EntryFiles e;
    e.name = c.name;
    e.safetensors = (std::filesystem::path(dir) / c.file).string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(e.safetensors, ec)) {
      throw Error("--inputs: " + dir + "/index.json lists " + c.file + ", which is missing");
    }
    e.key = keys.add(c.name);
    e.call = {c.causal, c.alignment, c.scale};
    e.masked = c.masked;
    out.push_back(std::move(e));
  }
  if (files_found > out.size()) {
    text::print(text::progress_stream(), "note: {} holds {} captured inputs that its index.json does not list (an earlier "
                "capture's?): not scored\n", dir, files_found - out.size());
  }
  return out;
}

// Whether find_entries reads a file of this name as captured inputs (NAME.safetensors, NAME_q.npy, ...).
bool names_captured_inputs(const std::string& file) {
  return file.ends_with(".safetensors") || file.ends_with("_q.npy") || file.ends_with("_k.npy") ||
         file.ends_with("_v.npy");
}

// NAME.safetensors with tensors q, k, v, or NAME_q.npy, NAME_k.npy, NAME_v.npy; NAME is
// layer<L>[_t<T>]. Two names for one (layer, timestep) ("layer1" and "layer01") are refused. With an
// index.json, its calls (indexed_entries).
std::vector<EntryFiles> find_entries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error("--inputs: " + dir + (fs::exists(fs::symlink_status(dir, ec)) ? " is not a directory" : " does not exist"));
  }
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) files.push_back(it->path());
  if (ec) throw Error("--inputs: cannot read the directory " + dir + " (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  std::map<std::string, EntryFiles> found;
  for (const fs::path& path : files) {
    const std::string file = path.filename().string();
    if (!names_captured_inputs(file)) continue;
    std::string name;
    if (file.ends_with(".safetensors")) {
      name = file.substr(0, file.size() - 12);
      found[name].safetensors = path.string();
    } else {  // NAME_q.npy, NAME_k.npy or NAME_v.npy
      name = file.substr(0, file.size() - 6);
      const char which = file[file.size() - 5];
      found[name].npy[which == 'q' ? 0 : which == 'k' ? 1 : 2] = path.string();
    }
    found[name].name = name;
  }
  if (const auto calls = read_capture_index(dir)) return indexed_entries(dir, *calls, found.size());
  if (found.empty()) {
    throw Error("--inputs: " + dir + " holds no NAME.safetensors (q, k, v) or NAME_{q,k,v}.npy files");
  }
  // pasa.capture writes safetensors and then index.json: without one, the capture may have been
  // stopped before its index, whose settings the scores then lack.
  if (std::any_of(found.begin(), found.end(), [](const auto& f) { return !f.second.safetensors.empty(); })) {
    text::print(text::progress_stream(),
                "note: {} has no index.json: its calls are scored non-causal at scale 1/sqrt(D) (a "
                "pasa.capture stopped before it wrote its index leaves its files so)\n",
                dir);
  }
  std::vector<EntryFiles> out;
  EntryKeys keys;
  for (auto& [name, e] : found) {
    const int npy_parts = !e.npy[0].empty() + !e.npy[1].empty() + !e.npy[2].empty();
    if (!e.safetensors.empty() && npy_parts > 0) {
      throw Error("--inputs: " + name + " is both a .safetensors file and .npy files; keep one");
    }
    if (e.safetensors.empty() && npy_parts != 3) {
      throw Error("--inputs: " + name + " has " + std::to_string(npy_parts) + " of its _q/_k/_v.npy files");
    }
    e.key = keys.add(name);
    out.push_back(std::move(e));
  }
  return out;
}

QKV load_entry(const EntryFiles& e) {
  if (e.safetensors.empty()) return {io::read_npy(e.npy[0]), io::read_npy(e.npy[1]), io::read_npy(e.npy[2])};
  auto tensors = io::read_safetensors(e.safetensors);
  for (const char* n : {"q", "k", "v"}) {
    if (!tensors.count(n)) throw Error(e.safetensors + ": no tensor named '" + n + "' (need q, k, v)");
  }
  return {std::move(tensors["q"]), std::move(tensors["k"]), std::move(tensors["v"])};
}

void say_if_masked(const EntryFiles& e) {
  if (e.masked) {
    text::print(text::progress_stream(), "note: {} was captured with an attn_mask, which a capture does not keep: scored "
                "without it\n", e.name);
  }
}

// The plan must not overwrite a capture it is computed from: its tensors, or the index.json that holds
// its calls (where the capture has none yet too: a plan there would make the directory unreadable).
void check_plan_output(const std::string& out, const std::string& dir, const std::vector<EntryFiles>& entries) {
  std::vector<NamedPath> inputs;
  for (const EntryFiles& e : entries) {
    for (const std::string& path : e.paths()) inputs.push_back({"--inputs", path});
  }
  inputs.push_back({"--inputs", (std::filesystem::path(dir) / "index.json").string()});
  check_output_files(inputs, {{"--out", out}});
  // Nor a new file in the inputs' directory under a name find_entries reads as captured inputs: the
  // next calibrate of the directory would read the plan as one.
  namespace fs = std::filesystem;
  const fs::path plan(io::detail::resolve_output_path(out));  // (where a symbolic link leads)
  std::error_code ec;
  if (names_captured_inputs(plan.filename().string()) &&
      fs::equivalent(plan.has_parent_path() ? plan.parent_path() : fs::path("."), dir, ec)) {
    throw UsageError("--out: " + out + " inside --inputs " + dir + " has the name of captured inputs, so the "
                     "next calibrate of that directory would read the plan as one; name it plan.json or "
                     "write it elsewhere");
  }
}

// Runs step as the stage `what`: the text of a pasa::Error it throws (a refusal of the call), or none
// (a ResourceError ends the command).
template <class Step>
std::optional<std::string> refusal(const std::string& what, Step&& step) {
  try {
    run_stage(what, std::forward<Step>(step));
  } catch (const ResourceError&) {
    throw;
  } catch (const Error& err) {
    return err.what();
  }
  return std::nullopt;
}

void calibrate_plan(const CalibrateOptions& opt) {
  if (!(opt.xi >= 0 && opt.xi <= 100)) throw UsageError(text::format("--xi: {} is outside 0..100", opt.xi));
  const double xi = opt.xi + 0.0;  // (-0 given is printed and written as 0)
  if (opt.out.empty()) throw UsageError("--out: give the plan file to write");
  const Policy fast = parse_policy_option("--fast", opt.fast);
  parse_policy_option("--accurate", opt.accurate);
  route_around_outputs({{"--out", opt.out}});  // (first: the notes find_entries prints stay out of --out)
  const std::vector<EntryFiles> entries = find_entries(opt.inputs);
  check_plan_output(opt.out, opt.inputs, entries);
  // Worst first: the lowest score; among equal ones (0: pointing away, or off by more than its size)
  // the lowest CosSim, then the largest L1, then the entry's name.
  std::vector<std::tuple<double, double, double, std::pair<int, int>>> ranked;
  std::map<std::pair<int, int>, double> scores;
  for (const EntryFiles& e : entries) {
    ErrorMetrics m;
    say_if_masked(e);
    // A file that cannot be read ends the command; a call pasa cannot run at all (its reference
    // refuses it) is left out of the plan, which sends it to the default (a patch then runs torch's
    // SDPA for it); one the fast policy refuses scores the worst.
    QKV data;
    try {
      data = run_stage("reading " + e.name, [&] { return load_entry(e); });
    } catch (const ResourceError&) {
      throw;
    } catch (const Error& err) {
      throw Error(opt.inputs + "/" + e.name + ": " + err.what());
    }
    std::vector<double> want;
    if (const auto why = refusal("the fp64 reference of " + e.name, [&] { want = reference_output(data, e.call); })) {
      text::print(stderr, "pasa calibrate: {}: left out of the plan: pasa cannot run this call ({})\n", e.name, *why);
      continue;
    }
    const auto refused = refusal("scoring " + e.name, [&] {
      m = compare(attention_output(data, fast, nullptr, e.call), want);
    });
    // The report's score: CosSim * (1 - L1), each factor at least 0 (an output that points away from
    // fp64's and is off by more than its size would otherwise score as well as a good one: two
    // negative factors); a refused call, a non-finite output, or metrics without a value (an fp64
    // output of zeros), the worst possible.
    const bool measured = !refused && m.nan_share == 0 && std::isfinite(m.cos_sim) && std::isfinite(m.rel_l1);
    const double score = measured ? std::max(m.cos_sim, 0.0) * std::max(1.0 - m.rel_l1, 0.0) : -1.0;
    ranked.push_back({score, measured ? m.cos_sim : -2.0, measured ? -m.rel_l1 : -HUGE_VAL, e.key});
    scores[e.key] = score;
    if (refused) {
      text::print(text::progress_stream(), "{}: {} refuses it ({}): score -1\n", e.name, opt.fast, *refused);
    } else {
      text::print(text::progress_stream(), "{}: CosSim {:.5f}  L1 {:.4f}  score {:.5f}\n", e.name, m.cos_sim, m.rel_l1,
                  score);
    }
  }
  std::sort(ranked.begin(), ranked.end());
  // (A relative allowance: 10% of 10 entries, 1.0000000000000002 in floating point, is one entry, and any
  // xi > 0 at least one.)
  const double share = xi / 100.0 * static_cast<double>(ranked.size());
  const auto n_accurate = static_cast<std::size_t>(std::ceil(share * (1.0 - 1e-12)));
  MixPlan plan{opt.fast, opt.accurate, xi, {}};
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    plan.entries[std::get<3>(ranked[i])] = i < n_accurate ? opt.accurate : opt.fast;
  }
  write_checked_outputs([&] { save_plan(opt.out, plan, scores); });
  text::print("{} entries: {} use {} (the worst {}%, rounded up to whole entries), {} use {}; wrote {}\n",
              ranked.size(), n_accurate, opt.accurate, xi, ranked.size() - n_accurate, opt.fast, opt.out);
}

// One entry in memory at a time, its scores one row at a time into a fixed-size histogram.
void calibrate_phi_command(const CalibrateOptions& opt) {
  const std::vector<EntryFiles> entries = find_entries(opt.inputs);
  const Policy fdpp = preset_policy("fdpp");
  ScoreHistogram histogram;
  std::size_t scored = 0;
  for (const EntryFiles& e : entries) {
    say_if_masked(e);
    // (a call whose scale fdpp cannot take, as the plan leaves out one pasa cannot run: its scores
    // would set a phi no run can use)
    if (e.call.scale) {
      if (const auto why = refusal("checking the scale of " + e.name, [&] { check_scale(*e.call.scale, fdpp); })) {
        text::print(stderr, "pasa calibrate: {}: left out: fdpp cannot run this call ({})\n", e.name, *why);
        continue;
      }
    }
    ++scored;
    try {
      run_stage("reading the scores of " + e.name, [&] {
        const QKV data = load_entry(e);
        for_each_score_row(data.q, data.k, 0.0, 128, [&](std::span<const double> row) { histogram.add(row); },
                           e.call);
      });
    } catch (const ResourceError&) {
      throw;
    } catch (const Error& err) {
      throw Error(opt.inputs + "/" + e.name + ": " + err.what());
    }
  }
  if (scored == 0) throw Error(opt.inputs + ": no captured call that fdpp can run, so no scores to calibrate phi from");
  const PhiCalibration c = calibrate_phi(histogram, fdpp.window_lo, fdpp.window_hi);
  text::print("scaled scores of {} entries: 99.98% within [{:.4g}, {:.4g}]\n", scored, c.lo, c.hi);
  text::print("phi = {:.6g} centres them in the window {} < x - phi < {}\n", c.phi, fdpp.window_lo, fdpp.window_hi);
  text::print("policy: fdpp,phi={:.6g}\n", c.phi);
  if (c.hi - c.lo >= fdpp.window_hi - fdpp.window_lo) {
    text::print("note: the score range is wider than the window: rows spanning it will be recomputed\n");
  }
}

}  // namespace

void add_calibrate_command(Command& app) {
  auto opt = std::make_shared<CalibrateOptions>();
  Command* cmd = app.add_subcommand(
      "calibrate", "Adaptive mixing: score each captured (layer, timestep) under the fast policy by "
                   "CosSim * (1 - L1) against fp64 and send the worst xi% to the accurate policy "
                   "(writes a plan); with --phi, derive FlashDecoding++'s unified max from score statistics.");
  cmd->add_option("--inputs", opt->inputs,
                  "directory of captured inputs: layer<L>[_t<T>].safetensors (q, k, v) or "
                  "layer<L>[_t<T>]_{q,k,v}.npy")->required();
  // --phi prints phi and writes no plan: the plan's options are refused with it.
  const Option* phi = cmd->add_flag("--phi", opt->phi, "derive phi for the fdpp policy instead of writing a plan");
  cmd->add_option("--fast", opt->fast, "policy for most entries")->capture_default_str()->excludes(phi);
  cmd->add_option("--accurate", opt->accurate, "policy for the worst entries")->capture_default_str()->excludes(phi);
  cmd->add_option("--xi", opt->xi, "percent of entries sent to the accurate policy (0..100)")
      ->capture_default_str()
      ->excludes(phi);
  cmd->add_option("--out", opt->out, "plan file to write (JSON; required without --phi)")->excludes(phi);
  cmd->callback([opt] { opt->phi ? calibrate_phi_command(*opt) : calibrate_plan(*opt); });
}

}  // namespace pasa::cli
