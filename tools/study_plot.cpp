// SPDX-License-Identifier: Apache-2.0
#include "study_plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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
  // python3 is started with an argument list (no shell), so any directory name works; its stdout
  // (one PNG path a line) comes back through a pipe.
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw Error("--plot: cannot create a pipe to python3");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  std::string script_arg = script_path.string(), json_arg = json_path.string(), dir_arg = directory;
  char python[] = "python3";
  char* argv[] = {python, script_arg.data(), json_arg.data(), dir_arg.data(), nullptr};
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, "python3", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  std::vector<std::string> written;
  std::string pending;
  char buffer[4096];
  ssize_t got = 0;
  while (spawn_error == 0 && (got = read(pipe_fds[0], buffer, sizeof buffer)) != 0) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    pending.append(buffer, static_cast<std::size_t>(got));
  }
  close(pipe_fds[0]);
  std::istringstream lines(pending);
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) written.push_back(line);
  }
  int status = 1;
  if (spawn_error == 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  fs::remove(script_path, ec);
  if (spawn_error != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error("--plot: the plotting script failed (it needs python3 with matplotlib: "
                "pip install matplotlib); the results are in " + json_path.string());
  }
  return written;
}

}  // namespace pasa::cli
