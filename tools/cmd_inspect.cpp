// SPDX-License-Identifier: Apache-2.0
// pasa inspect: value ranges of K and of the scores before and after PASA's shift (section 3.3.2).

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>

#include "commands.h"
#include "pasa/error.h"
#include "pasa/generators.h"
#include "pasa/policy.h"
#include "policy_options.h"
#include "stage.h"
#include "tensor_files.h"
#include "text/format.h"

namespace pasa::cli {
namespace {

struct InspectOptions {
  std::string q, k, gen = "resonance", preset = "qwen2";
  double x0 = 20, am = 10, beta = kPaperBeta;
  int block = 128;
  std::int64_t seq = 1280, heads = 2;
  std::uint64_t seed = 2024;
};

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double x) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  std::string text() const { return text::format("[{:.6g}, {:.6g}]", lo, hi); }
};

// Throws naming the option when a tensor has an empty dimension or a non-finite value: the ranges of
// such a tensor mean nothing (and a zero head count would divide by zero below).
void check_inspectable(const HostTensor& tensor, const TensorView& t, const std::string& option) {
  static const char* dims[] = {"batch", "heads", "sequence", "head dim"};
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 1) throw Error(text::format("{}: {} size is {} (must be at least 1)", option, dims[i], t.shape[i]));
  }
  const std::vector<float> values = to_float(tensor);
  const auto bad = std::find_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
  if (bad != values.end()) {
    throw Error(text::format("{}: non-finite value {} at flat index {} (inputs must be finite)", option, *bad,
                            bad - values.begin()));
  }
}

// Options that apply to one generator only; given for another, they would be ignored.
struct GeneratorOptionsGiven {
  bool x0, am, preset;
};

// The largest magnitude a standard normal draw reaches: Box-Muller's radius sqrt(-2 ln u1) with u1
// in [2^-53, 1] (data/random.h).
const double kMaxNormalDraw = std::sqrt(106.0 * std::numbers::ln2);

// --x0 and --am for uniform_qkv or hybrid_qkv (fp16, as the study draws them), checked before any data
// is drawn: every value they can draw must be finite in fp16, whatever the seed and the size.
void check_paper_parameters(const InspectOptions& opt) {
  if (!std::isfinite(opt.x0)) throw UsageError(text::format("--x0: {} is not finite", opt.x0));
  if (!(std::isfinite(opt.am) && opt.am >= 0)) {
    throw UsageError(text::format("--am: {} is not finite and >= 0", opt.am));
  }
  // uniform draws from [x0 - am, x0 + am); hybrid adds N(0, 1) and, for outliers, N(0, am^2) to x0.
  const bool uniform = opt.gen == "uniform";
  const double reach = std::fabs(opt.x0) + (uniform ? opt.am : kMaxNormalDraw * (1 + opt.am));
  constexpr double kFp16Max = 65504;
  if (reach > kFp16Max) {
    throw UsageError(text::format("--x0/--am: {} with x0 = {:g}, Am = {:g} can draw {:g} in magnitude{}, "
                                  "beyond fp16's {:g}", opt.gen, opt.x0, opt.am, reach,
                                  uniform ? "" : text::format(" (|x0| + {:.4g} (1 + Am))", kMaxNormalDraw),
                                  kFp16Max));
  }
}

void run(const InspectOptions& opt, const GeneratorOptionsGiven& given) {
  check_block_option("--block", opt.block);
  check_beta_option("--beta", opt.beta);
  if (opt.seq < 1) throw UsageError(text::format("--seq: {} is not a positive length", opt.seq));
  if (opt.heads < 1) throw UsageError(text::format("--heads: {} is not a positive count", opt.heads));
  HostTensor q, k;
  std::string source;
  if (!opt.q.empty() || !opt.k.empty()) {
    if (opt.q.empty() || opt.k.empty()) throw UsageError("give both --q and --k");
    q = load_tensor_file(opt.q, "q");
    k = load_tensor_file(opt.k, "k");
    source = opt.q + ", " + opt.k;
  } else {
    const bool paper = opt.gen == "uniform" || opt.gen == "hybrid";
    if (!paper && opt.gen != "resonance") {
      throw UsageError("--gen: '" + opt.gen + "' is not uniform, hybrid or resonance");
    }
    if (!paper && (given.x0 || given.am)) {
      throw UsageError("--x0/--am: apply to --gen uniform or hybrid, not resonance");
    }
    if (paper && given.preset) throw UsageError("--preset: applies to --gen resonance, not " + opt.gen);
    ResonanceParams preset;
    if (paper) {
      check_paper_parameters(opt);
    } else {
      try {
        preset = resonance_preset(opt.preset);
      } catch (const Error& e) {
        throw UsageError(std::string("--preset: ") + e.what());
      }
    }
    const Shape4 shape{1, opt.heads, opt.seq, 128};
    QKV data = !paper ? resonance_qkv(shape, preset, opt.seed)
               : opt.gen == "uniform" ? uniform_qkv(shape, opt.x0, opt.am, opt.seed)
                                      : hybrid_qkv(shape, opt.x0, opt.am, opt.seed);
    q = std::move(data.q);
    k = std::move(data.k);
    source = paper ? text::format("{} x0={:g} Am={:g}", opt.gen, opt.x0, opt.am) : "resonance (" + opt.preset + ")";
  }
  const TensorView qv = q.view("--q"), kv = k.view("--k");
  check_inspectable(q, qv, "--q");
  check_inspectable(k, kv, "--k");
  if (qv.dim() != kv.dim() || qv.batch() != kv.batch() || qv.heads() % kv.heads() != 0) {
    throw Error(text::format("inspect: --q [{}, {}, {}, {}] and --k [{}, {}, {}, {}] do not form an attention problem "
                             "(same batch and head dim, H_q a multiple of H_kv)", qv.batch(), qv.heads(), qv.seq(),
                             qv.dim(), kv.batch(), kv.heads(), kv.seq(), kv.dim()));
  }
  const std::vector<float> qf = to_float(q), kf = to_float(k);
  const std::int64_t D = qv.dim(), Sq = qv.seq(), Skv = kv.seq();
  Range k_range, k_shift_range, s_range, s_shift_range;
  std::vector<double> kshift(static_cast<std::size_t>(Skv * D));
  // Every score in fp64, S_q x S_kv x D a head: minutes at long sequences, so it says it is running.
  const StageHeartbeat heartbeat("the score ranges");
  for (std::int64_t b = 0; b < kv.batch(); ++b)
    for (std::int64_t h = 0; h < kv.heads(); ++h) {
      const float* kh = &kf[static_cast<std::size_t>(((b * kv.heads() + h) * Skv) * D)];
      // K' = K - beta * mean over each block of s2 keys (M without the softmax scale, as the paper's
      // section 3.3.2 reports it).
      for (std::int64_t k0 = 0; k0 < Skv; k0 += opt.block) {
        const std::int64_t n = std::min<std::int64_t>(opt.block, Skv - k0);
        for (std::int64_t d = 0; d < D; ++d) {
          double mean = 0;
          for (std::int64_t r = k0; r < k0 + n; ++r) mean += kh[r * D + d];
          mean /= static_cast<double>(n);
          for (std::int64_t r = k0; r < k0 + n; ++r) {
            k_range.add(kh[r * D + d]);
            kshift[r * D + d] = kh[r * D + d] - opt.beta * mean;
            k_shift_range.add(kshift[r * D + d]);
          }
        }
      }
      for (std::int64_t hq = h * (qv.heads() / kv.heads()); hq < (h + 1) * (qv.heads() / kv.heads()); ++hq) {
        const float* qh = &qf[static_cast<std::size_t>(((b * qv.heads() + hq) * Sq) * D)];
        for (std::int64_t r = 0; r < Sq; ++r)
          for (std::int64_t c = 0; c < Skv; ++c) {
            double s = 0, s_shift = 0;
            for (std::int64_t d = 0; d < D; ++d) {
              s += static_cast<double>(qh[r * D + d]) * kh[c * D + d];
              s_shift += static_cast<double>(qh[r * D + d]) * kshift[c * D + d];
            }
            s_range.add(s);
            s_shift_range.add(s_shift);
          }
      }
    }
  text::print("inputs: {}  q [{}, {}, {}, {}]  k [{}, {}, {}, {}]\n", source, qv.shape[0], qv.shape[1],
              qv.shape[2], qv.shape[3], kv.shape[0], kv.shape[1], kv.shape[2], kv.shape[3]);
  text::print("PASA shift: beta = {:g}, s2 = {} (scores unscaled: Q K^T)\n\n", opt.beta, opt.block);
  text::print("| quantity | before shift | after shift |\n|---|---|---|\n");
  text::print("| K range | {} | {} |\n", k_range.text(), k_shift_range.text());
  text::print("| score range | {} | {} |\n", s_range.text(), s_shift_range.text());
  const double fp16_max = 65504.0;
  text::print("\nscores beyond fp16's 65504: before {}, after {}\n",
              std::max(-s_range.lo, s_range.hi) > fp16_max ? "yes" : "no",
              std::max(-s_shift_range.lo, s_shift_range.hi) > fp16_max ? "yes" : "no");
}

}  // namespace

void add_inspect_command(Command& app) {
  auto opt = std::make_shared<InspectOptions>();
  Command* cmd = app.add_subcommand(
      "inspect", "Print the K range and the score range before and after PASA's shift, for given or "
                 "generated inputs (default: the resonance generator, Qwen2-7B-like).");
  const Option* q = cmd->add_option("--q", opt->q, "query tensor file (.npy / .safetensors)");
  const Option* k = cmd->add_option("--k", opt->k, "key tensor file");
  // The generator's options describe inputs that files replace: given with --q/--k they are refused.
  const auto generator_option = [&](const std::string& name, auto& target, const std::string& description) {
    return cmd->add_option(name, target, description)->capture_default_str()->excludes(q)->excludes(k);
  };
  generator_option("--gen", opt->gen, "generator when no files: uniform, hybrid or resonance");
  const Option* preset = generator_option("--preset", opt->preset, "resonance preset: qwen2 or svd");
  const Option* x0 = generator_option("--x0", opt->x0, "mean for uniform/hybrid");
  const Option* am = generator_option("--am", opt->am, "amplitude for uniform/hybrid");
  cmd->add_option("--beta", opt->beta, "PASA beta, in [0, 1)")->capture_default_str();
  cmd->add_option("--block", opt->block, "key block size s2, 1..1024 (the policy's range)")
      ->capture_default_str()
      ->range(kBlockOptionRange);
  generator_option("--seq", opt->seq, "sequence length of generated inputs");
  generator_option("--heads", opt->heads, "heads of generated inputs");
  generator_option("--seed", opt->seed, "seed of generated inputs");
  cmd->callback([opt, x0, am, preset] { run(*opt, {x0->given(), am->given(), preset->given()}); });
}

}  // namespace pasa::cli
