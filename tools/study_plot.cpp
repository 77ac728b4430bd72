// SPDX-License-Identifier: Apache-2.0
#include "study_plot.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "io/atomic_file.h"
#include "pasa/error.h"
#include "plot_script.h"  // generated: the texts of tools/plot_study.py and tools/plot_sage.py
#include "text/format.h"

namespace pasa::cli {
namespace {

struct PythonRun {
  bool found = false;             // python3 was on the PATH and started
  bool succeeded = false;         // and exited with status 0
  std::vector<std::string> lines;  // its stdout and stderr together, one entry a non-empty line
};

// Runs python3 with `args` as an argument list (no shell, so any directory name works), its stdout
// and stderr through one pipe: a failure's message is its last line.
PythonRun run_python(std::vector<std::string> args) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    throw ResourceError(std::string("--plot: cannot create a pipe to python3: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  char python[] = "python3";
  std::vector<char*> argv{python};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, python, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  ssize_t got = 0;
  while (spawn_error == 0 && (got = read(pipe_fds[0], buffer, sizeof buffer)) != 0) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer, static_cast<std::size_t>(got));
  }
  close(pipe_fds[0]);
  PythonRun run;
  if (spawn_error != 0) return run;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // 127: the status a spawn reports from the child when the program could not be executed.
  run.found = !(WIFEXITED(status) && WEXITSTATUS(status) == 127);
  run.succeeded = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) run.lines.push_back(line);
  }
  return run;
}

}  // namespace

bool prepare_plot_directory(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir(directory);
  if (!dir.has_filename()) dir = dir.parent_path();  // "figures/" names the directory "figures"
  const bool exists = fs::exists(dir, ec);
  if (exists && !fs::is_directory(dir, ec)) throw Error("--plot: " + directory + " is not a directory");
  if (!exists) {
    const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
    if (!fs::is_directory(parent, ec)) {
      throw Error("--plot: " + directory + ": " + parent.string() +
                  (fs::exists(parent, ec) ? " is not a directory" : " does not exist"));
    }
  }
  // Checked before anything is created, and before the study: it would be missing only at its end.
  const PythonRun probe = run_python({"-c", "import matplotlib"});
  if (!probe.found) {
    throw ResourceError("--plot: the figures need python3 with matplotlib, and no python3 is on the PATH "
                        "(install Python 3, then: pip install matplotlib)");
  }
  if (!probe.succeeded) {
    throw ResourceError("--plot: the figures need matplotlib, which python3 cannot import (pip install matplotlib)");
  }
  if (exists) return false;
  if (::mkdir(dir.c_str(), 0777) == 0) return true;
  if (errno == EEXIST && fs::is_symlink(fs::symlink_status(dir, ec))) {
    throw Error("--plot: " + directory + " is a symbolic link to a directory that does not exist");
  }
  if (errno != EEXIST) throw Error("--plot: cannot create " + directory + " (" + std::strerror(errno) + ")");
  return false;  // (made by another process meanwhile)
}

std::string plot_results_path(PlotKind kind, const std::string& directory) {
  return (std::filesystem::path(directory) / (kind == PlotKind::paper_study ? "study.json" : "study_sage.json"))
      .string();
}

std::vector<std::string> write_study_plots(PlotKind kind, const std::string& results_json,
                                           const std::string& directory) {
  const std::string json_path = plot_results_path(kind, directory);
  io::detail::write_text_atomically(json_path, results_json);
  // The script goes to python3 as `-c` text, so no file of it is left in the directory whatever stops
  // the run, and a directory whose name begins with '-' is only the script's argument (sys.argv[2]).
  const PythonRun run =
      run_python({"-c", kind == PlotKind::paper_study ? kPlotStudyScript : kPlotSageScript, json_path, directory});
  if (!run.succeeded) {
    throw ResourceError("--plot: the plotting script failed" +
                        (run.lines.empty() ? std::string() : " (" + run.lines.back() + ")") +
                        "; the results are in " + json_path);
  }
  // The script prints the PNGs it wrote; anything else it said (a matplotlib warning) is passed on.
  std::vector<std::string> written;
  for (const std::string& line : run.lines) {
    if (line.ends_with(".png")) {
      written.push_back(line);
    } else {
      text::print(text::progress_stream(), "{}\n", line);
    }
  }
  return written;
}

}  // namespace pasa::cli
