// SPDX-License-Identifier: Apache-2.0
// `pasa study decode`: FlashDecoding++'s unified max on decode shapes, and our own question — does
// phi = 0 on PASA-shifted scores remove the need for per-model calibration?
#pragma once

#include <cstdint>

#include "text/json.h"

namespace pasa::cli {

struct DecodeStudyConfig {
  std::int64_t batch = 4, heads_q = 8, heads_kv = 2, seq_kv = 4096;
  std::uint64_t seed = 2024;
};

text::Json run_decode_study(const DecodeStudyConfig& config);

}  // namespace pasa::cli
