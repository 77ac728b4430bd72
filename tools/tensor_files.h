// SPDX-License-Identifier: Apache-2.0
// Loading Q/K/V for the CLI from .npy or .safetensors files.
#pragma once

#include <string>

#include "pasa/tensor.h"

namespace pasa::cli {

// A .npy file, or a .safetensors file holding exactly one tensor (or one named `name`).
HostTensor load_tensor_file(const std::string& path, const std::string& name);

}  // namespace pasa::cli
