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
// An output that is standard output itself (`--json /dev/stdout`) keeps it for that file alone: the
// command's report (text::print) goes to standard error from here on.
void check_output_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

// Runs `write`, the writing of outputs that check_output_files accepted before the work: a failure now
// is the machine's (a disk that filled, a directory removed meanwhile), so a pasa::Error from it is
// rethrown as a pasa::ResourceError (exit 1), its message unchanged.
void write_checked_outputs(const std::function<void()>& write);

}  // namespace pasa::cli
