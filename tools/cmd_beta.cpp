// SPDX-License-Identifier: Apache-2.0
// pasa beta: PASA's optimal beta for a format and block size (the paper's Table 3).

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "commands.h"
#include "numerics/pasa_shift.h"
#include "pasa/beta.h"
#include "pasa/error.h"
#include "policy_options.h"
#include "text/format.h"

namespace pasa::cli {
namespace {

struct BetaOptions {
  std::string format = "fp16";
  int block = 128;
  std::vector<double> init{0.9, 1 - 1.0 / 16, 1 - 1.0 / 32, 1 - 1.0 / 64, 0.99, 0.999};
  std::optional<double> scale;
};

// Why no fixed point is reached from `initial`, or nothing. The solver iterates beta <- the beta that
// M, built from beta and rounded to the format, really applies; where that lies outside [0, 1) (M
// singular, or its rounded row sum above 1) the iteration cannot go on. An initial value too close to
// 1 for the format (0.999 in bf16 at s2 = 128) fails so at once: said here, not blamed on the block.
std::string unsolvable_reason(double initial, const Format& format, const BetaOptions& opt) {
  const double factor = opt.scale.value_or(1.0);
  const double g = pasa_shift(initial, opt.block, factor, format).invariance;
  const double applied = 1.0 - 1.0 / (1.0 + g);  // beta from G = beta / (1 - beta); 1 where M is singular
  if (applied >= 0.0 && applied < 1.0) return "";
  return text::format("M rounded to {} applies beta = {:g}, outside [0, 1) ({} cannot hold this beta at s2 = {})",
                      format.name(), applied, format.name(), opt.block);
}

void run(const BetaOptions& opt) {
  Format format;
  try {
    format = parse_format(opt.format);
  } catch (const Error& e) {
    throw UsageError(std::string("--format: ") + e.what());
  }
  if (format.is_integer()) {
    throw UsageError("--format: " + format.name() + " is an integer format; M needs a float one");
  }
  check_block_option("--block", opt.block);
  for (const double b0 : opt.init) {
    if (!(b0 > 0.0 && b0 < 1.0)) throw UsageError(text::format("--init: {} is outside (0, 1)", b0));
  }
  if (opt.scale && !(std::isfinite(*opt.scale) && *opt.scale > 0.0)) {
    throw UsageError(text::format("--scale: {} is not positive and finite", *opt.scale));
  }
  // M's diagonal is about the scale: past the format's largest value it is inf, and no beta is left.
  if (opt.scale && *opt.scale > format.max_finite()) {
    throw UsageError(text::format("--scale: {:g} folded into M is beyond {}'s largest value {:g}", *opt.scale,
                                  format.name(), format.max_finite()));
  }
  text::print("optimal beta for {} with s2 = {}{}\n\n", format.name(), opt.block,
              opt.scale ? text::format(", scale {:g} folded into M", *opt.scale) : ", scale kept out of M");
  text::print("| initial beta | optimal beta | beta/(1-beta) ideal | beta/(1-beta) in {} |\n", format.name());
  text::print("|---|---|---|---|\n");
  // (six decimals where they give the value back; else the shortest digits that do, so that
  // 0.99999999 is not shown as 1.000000 nor a millionth's fraction as 0.000000)
  const auto initial_text = [](double b0) {
    const std::string six = text::format("{:.6f}", b0);
    return std::strtod(six.c_str(), nullptr) == b0 ? six : text::format("{}", b0);
  };
  int solved = 0;
  for (const double b0 : opt.init) {
    std::string reason = unsolvable_reason(b0, format, opt);
    if (reason.empty()) {
      try {
        const BetaSolution s = solve_beta(b0, format, opt.block, opt.scale);
        if (s.beta > 0.0) {
          // (beta / (1 - beta) past the format's largest value: its rounding is NaN or inf, said in words)
          const std::string stored = std::isfinite(s.invariance_rounded)
                                         ? text::format("{:g}", s.invariance_rounded)
                                         : "beyond " + format.name() + "'s largest value";
          text::print("| {} | {:.6f} | {:.4f} | {} |\n", initial_text(s.initial), s.beta, s.invariance, stored);
          ++solved;
          continue;
        }
        // (the fixed point beta = 0: M's off-diagonal rounds to 0, so M shifts nothing)
        reason = "M's off-diagonal entries round to 0 in " + format.name() + ": no shift is left";
      } catch (const ResourceError&) {
        throw;
      } catch (const Error&) {  // the inputs were checked above: only the iteration itself fails here
        reason = "the iteration from it reaches a beta that " + format.name() + " cannot hold";
      }
    }
    text::print("| {} | none: {} | - | - |\n", initial_text(b0), reason);
  }
  if (solved == 0) {
    const std::string where = format.name() + " at s2 = " + std::to_string(opt.block);
    BetaOptions unscaled = opt;
    unscaled.scale.reset();
    const bool scale_is_why = opt.scale && std::any_of(opt.init.begin(), opt.init.end(), [&](double b0) {
      return unsolvable_reason(b0, format, unscaled).empty();
    });
    if (scale_is_why) {
      throw Error(text::format("--scale: with {:g} folded into M no initial value leads to an optimal beta in {} "
                               "(each row says why; with the scale kept out of M, without --scale, they do)",
                               *opt.scale, where));
    }
    throw Error("--init: no initial value leads to an optimal beta in " + where + " (each row says why)");
  }
}

}  // namespace

void add_beta_command(Command& app) {
  auto opt = std::make_shared<BetaOptions>();
  Command* cmd = app.add_subcommand(
      "beta", "Solve PASA's optimal beta (fixed point of beta/(1-beta) = f(beta), the paper's Appendix "
              "A-C) for each initial value; the defaults reproduce the paper's Table 3. A row whose "
              "initial value the format cannot hold in M says so.");
  cmd->add_option("--format", opt->format, "format of the shifting matrix (fp16, bf16, e4m3, fp22, eXmY, ...)")
      ->capture_default_str();
  cmd->add_option("--block", opt->block, "key block size s2, 1..1024 (the policy's range)")
      ->capture_default_str()
      ->range(kBlockOptionRange);
  cmd->add_option("--init", opt->init, "initial values in (0, 1) (default: the paper's six)")->delimiter(',');
  cmd->add_option("--scale", opt->scale,
                  "softmax scale folded into M (as the pasa preset does, e.g. 0.0883883 for D = 128)");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace pasa::cli
