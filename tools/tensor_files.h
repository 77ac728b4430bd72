// SPDX-License-Identifier: Apache-2.0
// Tensor files for the CLI: loading Q/K/V from .npy or .safetensors files, and the bytes of an output
// tensor in the format its name asks for.
#pragma once

#include <string>

#include "io/atomic_file.h"
#include "pasa/tensor.h"

namespace pasa::cli {

// A .npy file, or a .safetensors file holding exactly one tensor (or one named `name`).
HostTensor load_tensor_file(const std::string& path, const std::string& name);

// An output tensor's format from its file name: .safetensors (one tensor, named by the caller), or
// .npy, which is also what a name without an extension gets (/dev/stdout, a pipe). Throws pasa::Error
// naming `option` for any other extension, so a name is never filled with another format's bytes.
void check_tensor_output_name(const std::string& option, const std::string& path);

// The file's bytes in that format; `name` is the tensor's name in a .safetensors file. The result
// borrows the tensor's bytes.
io::detail::FileBytes tensor_file_bytes(const std::string& path, const std::string& name, const HostTensor& tensor);

}  // namespace pasa::cli
