// SPDX-License-Identifier: Apache-2.0
#include "study_plot.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "io/atomic_file.h"
#include "pasa/error.h"
#include "plot_script.h"  // generated: the texts of tools/plot_study.py and tools/plot_sage.py

namespace pasa::cli {

void check_plot_directory(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path existing = fs::absolute(directory, ec);
  // The nearest existing ancestor must be a writable directory: the figures' directory is made in it.
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (!fs::is_directory(existing, ec) || ::access(existing.c_str(), W_OK | X_OK) != 0) {
    throw Error("--plot: cannot create or write " + directory + " (" + existing.string() +
                " is not a writable directory)");
  }
}

std::vector<std::string> write_study_plots(PlotKind kind, const std::string& results_json,
                                           const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw Error("--plot: cannot create directory " + directory + ": " + ec.message());
  const fs::path json_path =
      fs::path(directory) / (kind == PlotKind::paper_study ? "study.json" : "study_sage.json");
  const fs::path script_path = fs::path(directory) / ".plot_study.py";
  io::detail::write_text_atomically(json_path.string(), results_json);
  io::detail::write_text_atomically(script_path.string(),
                                    kind == PlotKind::paper_study ? kPlotStudyScript : kPlotSageScript);
  const std::string command = "python3 '" + script_path.string() + "' '" + json_path.string() + "' '" +
                              directory + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw Error("--plot: cannot start python3");
  std::vector<std::string> written;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (!s.empty()) written.push_back(s);
  }
  const int status = pclose(pipe);
  fs::remove(script_path, ec);
  if (status != 0) {
    throw Error("--plot: the plotting script failed (it needs python3 with matplotlib: "
                "pip install matplotlib); the results are in " + json_path.string());
  }
  return written;
}

}  // namespace pasa::cli
