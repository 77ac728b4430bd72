// SPDX-License-Identifier: Apache-2.0
// The bytes of .npy and .safetensors files before they are written: what write_npy and
// write_safetensors write, for a caller that writes several files together (FileBatch).
#pragma once

#include <map>
#include <string>

#include "io/atomic_file.h"
#include "pasa/tensor.h"

namespace pasa::io::detail {

// Throw pasa::Error when `path` (the file they are meant for) cannot name a file (check_path), or,
// naming it, when a tensor's bytes do not match its shape and dtype. The result borrows the tensors'
// bytes.
FileBytes npy_bytes(const std::string& path, const HostTensor& tensor);
// The tensors by name (their data in name order, as the map has them), borrowed.
FileBytes safetensors_bytes(const std::string& path, const std::map<std::string, const HostTensor*>& tensors);

}  // namespace pasa::io::detail
