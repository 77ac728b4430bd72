// SPDX-License-Identifier: Apache-2.0
// pasa beta: PASA's optimal beta for a format and block size (the paper's Table 3).

#include <memory>

#include "commands.h"
#include "pasa/beta.h"
#include "text/format.h"

namespace pasa::cli {
namespace {

struct BetaOptions {
  std::string format = "fp16";
  int block = 128;
  std::vector<double> init{0.9, 1 - 1.0 / 16, 1 - 1.0 / 32, 1 - 1.0 / 64, 0.99, 0.999};
  std::optional<double> scale;
};

void run(const BetaOptions& opt) {
  const Format format = parse_format(opt.format);
  text::print("optimal beta for {} with s2 = {}{}\n\n", format.name(), opt.block,
              opt.scale ? text::format(", scale {:g} folded into M", *opt.scale) : ", scale kept out of M");
  text::print("| initial beta | optimal beta | beta/(1-beta) ideal | beta/(1-beta) in {} |\n", format.name());
  text::print("|---|---|---|---|\n");
  for (double b0 : opt.init) {
    const BetaSolution s = solve_beta(b0, format, opt.block, opt.scale);
    text::print("| {:.6f} | {:.6f} | {:.4f} | {:g} |\n", s.initial, s.beta, s.invariance, s.invariance_rounded);
  }
}

}  // namespace

void add_beta_command(Command& app) {
  auto opt = std::make_shared<BetaOptions>();
  Command* cmd = app.add_subcommand(
      "beta", "Solve PASA's optimal beta (fixed point of beta/(1-beta) = f(beta), the paper's Appendix "
              "A-C) for each initial value; the defaults reproduce the paper's Table 3.");
  cmd->add_option("--format", opt->format, "format of the shifting matrix (fp16, bf16, ...)")
      ->capture_default_str();
  cmd->add_option("--block", opt->block, "key block size s2")->capture_default_str();
  cmd->add_option("--init", opt->init, "initial values (default: the paper's six)")->delimiter(',');
  cmd->add_option("--scale", opt->scale,
                  "softmax scale folded into M (as the pasa preset does, e.g. 0.0883883 for D = 128)");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace pasa::cli
