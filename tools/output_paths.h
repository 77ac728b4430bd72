// SPDX-License-Identifier: Apache-2.0
// Output files of a command, checked before any work: each can be written (its directory exists and
// is writable, it is not a directory, the temporary file the write will use can be created next to it),
// and none is the same file as an input or another output — compared by device and inode, so
// different spellings, symbolic and hard links of one file are caught.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace pasa::cli {

struct NamedPath {
  std::string option;  // "--out", "--q", ... for the message
  std::string path;
};

// Throws pasa::Error naming the option and the path. Empty paths (an option not given) are skipped.
// Routes the report and the progress around the outputs (route_around_outputs).
void check_output_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

// An output that is the file standard output or standard error is open on (`--json /dev/stdout`,
// `--out /dev/stderr`, `--out /dev/stdout > f 2>&1`; a terminal never counts) keeps it for that file
// alone: from here on the report (text::print) goes to the other stream or nowhere, the progress
// (text::progress_stream) nowhere.
void route_around_outputs(const std::vector<NamedPath>& outputs);

// Runs `write`, the writing of outputs that check_output_files accepted before the work: a failure now
// is the machine's (a disk that filled, a directory removed meanwhile), so a pasa::Error from it is
// rethrown as a pasa::ResourceError (exit 1), its message unchanged.
void write_checked_outputs(const std::function<void()>& write);

}  // namespace pasa::cli
