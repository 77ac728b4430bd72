// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the file readers: any byte string must either parse into a consistent tensor
// or give a pasa::Error. Any other exception, a crash, or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "pasa/error.h"
#include "pasa/io.h"

namespace {

// A tensor the readers return must hold exactly the bytes its shape says.
void check(const pasa::HostTensor& t) {
  if (t.bytes.size() != static_cast<std::size_t>(t.numel()) * pasa::dtype_size(t.dtype)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  try {
    check(pasa::io::parse_npy(bytes, "<fuzz>"));
  } catch (const pasa::Error&) {
  }
  try {
    for (const auto& [name, tensor] : pasa::io::parse_safetensors(bytes, "<fuzz>")) check(tensor);
  } catch (const pasa::Error&) {
  }
  return 0;
}
