// SPDX-License-Identifier: Apache-2.0
// Output files of a command, checked before any work: each can be written (its directory exists and
// is writable, it is not a directory), and none is the same file as an input or another output —
// compared by device and inode, so different spellings, symbolic and hard links of one file are caught.
#pragma once

#include <string>
#include <vector>

namespace pasa::cli {

struct NamedPath {
  std::string option;  // "--out", "--q", ... for the message
  std::string path;
};

// Throws pasa::Error naming the option and the path. Empty paths (an option not given) are skipped.
void check_output_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

}  // namespace pasa::cli
