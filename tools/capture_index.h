// SPDX-License-Identifier: Apache-2.0
// The index.json that `pasa.capture` writes beside the tensors it records: which files belong to the
// capture, and each call's options that change the attention it computed (what calibrate reproduces).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pasa/attention.h"

namespace pasa::cli {

struct CapturedCall {
  std::string name;  // layer<L>[_t<T>]
  std::string file;  // the .safetensors file, relative to the capture's directory
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::top_left;  // (torch's is_causal)
  std::optional<double> scale;                             // none: 1 / sqrt(D)
  bool masked = false;  // the call had an attn_mask, which a capture does not keep
};

// The calls DIR/index.json lists, or none when DIR has no index.json. Throws pasa::Error naming the
// file and the field where the index is not one `pasa.capture` writes, or lists no call.
std::optional<std::vector<CapturedCall>> read_capture_index(const std::string& dir);

}  // namespace pasa::cli
