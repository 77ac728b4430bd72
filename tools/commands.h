// SPDX-License-Identifier: Apache-2.0
// The pasa command's subcommands; each file registers one.
#pragma once

#include "args.h"

namespace pasa::cli {

void add_run_command(Command& app);
void add_study_command(Command& app);
void add_beta_command(Command& app);
void add_inspect_command(Command& app);
void add_calibrate_command(Command& app);
void add_bench_command(Command& app);
void add_overhead_command(Command& app);

}  // namespace pasa::cli
