// SPDX-License-Identifier: Apache-2.0
// Memory budget: a call estimates what it is about to allocate and asks here first, so a request too
// large for the machine is refused with a message instead of ending in std::bad_alloc (or the OOM
// killer) halfway through.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace pasa {

// The product of the factors, or UINT64_MAX when it overflows (a request that large is refused anyway).
std::uint64_t saturating_product(std::initializer_list<std::uint64_t> factors);

// The sum of the terms, or UINT64_MAX when it overflows.
std::uint64_t saturating_sum(std::initializer_list<std::uint64_t> terms);

// The address space this process has mapped (/proc/self/statm's first field, in pages), read with
// open and read: some sandboxes' procfs fails a C++ stream there. nullopt where it cannot be read.
std::optional<std::uint64_t> mapped_address_space_bytes();

// Bytes this process can still allocate: the smallest of the system's available memory, the room left
// under the address-space limit (ulimit -v) and the machine's physical memory, of those that can be
// read; nullopt when none can.
std::optional<std::uint64_t> available_memory_bytes();

// Throws pasa::ResourceError when `bytes` exceeds available_memory_bytes(): "<what>: needs N GiB, only
// M GiB is available". `what` names the request (e.g. "attention on [1, 8, 100000, 128]").
void require_memory(std::uint64_t bytes, const std::string& what);

// "1.50 GiB", "12.0 MiB", "512 B".
std::string byte_size_text(std::uint64_t bytes);

}  // namespace pasa
