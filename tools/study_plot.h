// SPDX-License-Identifier: Apache-2.0
// Figures for `pasa study --plot` and `pasa study sage --plot`: the study's JSON handed to a small
// matplotlib script (embedded in the binary at build time), run with the python3 on the PATH.
#pragma once

#include <string>
#include <vector>

namespace pasa::cli {

enum class PlotKind { paper_study, sage_study };

// Before a study runs: `directory` must be a writable directory, or be missing in an existing one (as
// --json's and --out's files may be missing in an existing directory; then it is created here, its
// last component only), and python3 must import matplotlib. Throws pasa::Error naming --plot for a bad
// directory (a symbolic link to a missing one included), and pasa::ResourceError (exit 1: the machine lacks
// it) when python3 or matplotlib is missing. Returns whether it created the directory.
bool prepare_plot_directory(const std::string& directory);

// The results file the figures are drawn from, written into the directory with them (for the output
// checks: --json must not be the same file).
std::string plot_results_path(PlotKind kind, const std::string& directory);

// Writes the results file and the PNGs into `directory` and returns the PNGs' paths. Throws
// pasa::ResourceError with the script's last line of error output when the plotting script fails.
std::vector<std::string> write_study_plots(PlotKind kind, const std::string& results_json,
                                           const std::string& directory);

}  // namespace pasa::cli
