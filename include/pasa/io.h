// SPDX-License-Identifier: Apache-2.0
// pasa/io.h — .npy and .safetensors files (fp32, fp16, bf16; C order). Files are untrusted input:
// every malformed, truncated or inconsistent file gives a pasa::Error that names the file and what is
// wrong; nothing reads out of bounds.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "pasa/tensor.h"

namespace pasa::io {

// `source` names the bytes in error messages (a file path, or e.g. "<memory>").
HostTensor parse_npy(std::span<const std::uint8_t> bytes, const std::string& source);
HostTensor read_npy(const std::string& path);
void write_npy(const std::string& path, const HostTensor& tensor);

std::map<std::string, HostTensor> parse_safetensors(std::span<const std::uint8_t> bytes,
                                                    const std::string& source);
std::map<std::string, HostTensor> read_safetensors(const std::string& path);
void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors);

}  // namespace pasa::io
