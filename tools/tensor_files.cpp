// SPDX-License-Identifier: Apache-2.0
#include "tensor_files.h"

#include <string>

#include "pasa/error.h"
#include "pasa/io.h"

namespace pasa::cli {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

HostTensor load_tensor_file(const std::string& path, const std::string& name) {
  if (ends_with(path, ".npy")) return io::read_npy(path);
  if (ends_with(path, ".safetensors")) {
    auto tensors = io::read_safetensors(path);
    if (auto it = tensors.find(name); it != tensors.end()) return std::move(it->second);
    if (tensors.size() == 1) return std::move(tensors.begin()->second);
    throw Error(path + ": holds " + std::to_string(tensors.size()) + " tensors and none named '" + name +
                "'");
  }
  throw Error(path + ": unknown file type (expected .npy or .safetensors)");
}

}  // namespace pasa::cli
