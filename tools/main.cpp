// SPDX-License-Identifier: Apache-2.0
// pasa — robust low-precision attention: run it, study its numerics, solve PASA's beta.
//
// Exit codes (docs/api.md): 0 success; 1 a runtime failure (out of memory, a failed write, a device
// error, anything unexpected); 2 bad input or usage (a bad option, file, shape or policy); 130 a
// `pasa study` stopped by Ctrl-C after printing what it finished. Every
// exception ends here as one "pasa: error: ..." line: none escapes main to abort the process.

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "ctrl_c.h"
#include "pasa/error.h"
#include "text/format.h"
#include "pasa/version.h"

namespace {

constexpr int kRuntimeFailure = 1;
constexpr int kBadInput = 2;
constexpr int kStoppedByCtrlC = 130;  // (128 + SIGINT, as a shell reports a process Ctrl-C ended)

// Why what was printed (tables, --help) did not reach standard output (a full disk, a closed
// stdout: a failed write, not a success), or empty.
std::string stdout_write_failure() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return {};
  return "writing to standard output failed" + (err != 0 ? std::string(": ") + std::strerror(err) : std::string());
}

int report(const char* what, int code) {
  pasa::text::print(stderr, "pasa: error: {}\n", what);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // A write past `ulimit -f` then fails with EFBIG, and one to a pipe whose reader has gone (`| head`)
  // with EPIPE, which the tool reports (exit 1, standard output's check below included) after
  // writing its files and removing its temporaries, instead of the signal killing it without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  pasa::cli::Command app{
      "pasa", "fast, robust low-precision attention (FlashAttention, PASA, SageAttention2, "
              "FlashDecoding++) with a CPU emulator of every rounding point."};
  app.require_subcommand();
  app.version(std::string("pasa ") + pasa::version());
  try {
    pasa::cli::add_run_command(app);
    pasa::cli::add_study_command(app);
    pasa::cli::add_beta_command(app);
    pasa::cli::add_inspect_command(app);
    pasa::cli::add_calibrate_command(app);
    pasa::cli::add_bench_command(app);
    pasa::cli::add_overhead_command(app);
    // Usage errors are printed by the parser and come back as kBadInput; --help as 0.
    const int code = app.main(argc, argv);
    if (const std::string failed = stdout_write_failure(); !failed.empty()) return report(failed.c_str(), kRuntimeFailure);
    return code;
  } catch (const pasa::cli::StoppedByCtrlC& e) {
    // (the rows it says are above must be there: `pasa study | tee log` loses them when the Ctrl-C
    // ends tee too)
    if (const std::string failed = stdout_write_failure(); !failed.empty()) {
      return report((e.unprinted() + "; " + failed).c_str(), kStoppedByCtrlC);
    }
    return report(e.what(), kStoppedByCtrlC);
  } catch (const pasa::ResourceError& e) {
    return report(e.what(), kRuntimeFailure);
  } catch (const pasa::Error& e) {
    return report(e.what(), kBadInput);
  } catch (const std::bad_alloc&) {
    return report("out of memory (an allocation failed; try a smaller problem)", kRuntimeFailure);
  } catch (const std::exception& e) {
    return report(e.what(), kRuntimeFailure);
  } catch (...) {
    return report("unknown failure", kRuntimeFailure);
  }
}
