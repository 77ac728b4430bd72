// SPDX-License-Identifier: Apache-2.0
// `pasa study sage`: SageAttention2's accuracy tables on the CPU emulator.
#pragma once

#include <cstdint>

#include "text/json.h"

namespace pasa::cli {

struct SageStudyConfig {
  std::int64_t heads = 2, seq = 1024;
  std::uint64_t seed = 2024;
};

// Prints the tables as markdown (progress on stderr) and returns every measurement as JSON rows.
text::Json run_sage_study(const SageStudyConfig& config);

}  // namespace pasa::cli
