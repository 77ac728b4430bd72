// SPDX-License-Identifier: Apache-2.0
#include "tensor_files.h"

#include <filesystem>
#include <string>

#include "io/tensor_bytes.h"
#include "pasa/error.h"
#include "pasa/io.h"

namespace pasa::cli {

HostTensor load_tensor_file(const std::string& path, const std::string& name) {
  if (path.ends_with(".npy")) return io::read_npy(path);
  if (path.ends_with(".safetensors")) {
    auto tensors = io::read_safetensors(path);
    if (auto it = tensors.find(name); it != tensors.end()) return std::move(it->second);
    if (tensors.size() == 1) return std::move(tensors.begin()->second);
    throw Error(path + ": holds " + std::to_string(tensors.size()) + " tensors and none named '" + name +
                "'");
  }
  if (std::filesystem::is_directory(path)) throw Error(path + ": is a directory, not a tensor file (.npy or .safetensors)");
  throw Error(path + ": unknown file type (expected .npy or .safetensors)");
}

void check_tensor_output_name(const std::string& option, const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension.empty() || extension == ".npy" || extension == ".safetensors") return;
  throw Error(option + ": " + path + ": unknown file type " + extension +
              " (write .npy or .safetensors; a name without an extension is written, as given, in .npy format)");
}

io::detail::FileBytes tensor_file_bytes(const std::string& path, const std::string& name, const HostTensor& tensor) {
  if (path.ends_with(".safetensors")) return io::detail::safetensors_bytes(path, {{name, &tensor}});
  return io::detail::npy_bytes(path, tensor);
}

}  // namespace pasa::cli
