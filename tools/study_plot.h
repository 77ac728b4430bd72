// SPDX-License-Identifier: Apache-2.0
// Figures for `pasa study --plot` and `pasa study sage --plot`: the study's JSON handed to a small
// matplotlib script (embedded in the binary at build time), run with the python3 on the PATH.
#pragma once

#include <string>
#include <vector>

namespace pasa::cli {

enum class PlotKind { paper_study, sage_study };

// Throws pasa::Error when `directory` can neither be written nor created (checked before a study runs).
void check_plot_directory(const std::string& directory);

// Writes the PNGs into `directory` (created if missing) and returns their paths. Throws pasa::Error
// with the fix when python3 or matplotlib is missing.
std::vector<std::string> write_study_plots(PlotKind kind, const std::string& results_json,
                                           const std::string& directory);

}  // namespace pasa::cli
