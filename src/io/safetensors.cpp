// SPDX-License-Identifier: Apache-2.0
// .safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header length
// N, N bytes of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the data section that the offsets index into.
//
// Reading enforces what the reference implementation does: every offset in range, each tensor's span
// exactly its shape's size, and the tensors tiling the data section with no gap, overlap or tail.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "io/atomic_file.h"
#include "io/byte_io.h"
#include "io/tensor_bytes.h"
#include "pasa/error.h"
#include "pasa/io.h"
#include "text/json.h"

namespace pasa::io {

namespace {

using text::Json;
using text::JsonError;

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
  }
  throw Error("safetensors_dtype: unknown dtype");
}

// A JSON value that must be a non-negative integer; `what` names the tensor and field for the message.
std::uint64_t to_uint(const Json& value, const std::string& what) {
  if (!value.is_integer()) {
    throw Error(what + " holds a " + value.type_name() + " where a non-negative integer belongs");
  }
  if (value.as_double() < 0) throw Error(what + " holds the negative value " + std::to_string(value.as_int64()));
  return value.as_uint64();
}

const Json& field(const Json& info, const char* key, const std::string& what) {
  const Json* member = info.find(key);
  if (member == nullptr) throw Error(what + ": missing \"" + key + "\"");
  return *member;
}

Entry parse_entry(const std::string& name, const Json& info, std::uint64_t data_size,
                  const std::string& source) {
  const std::string what = source + ": tensor " + detail::quoted(name);
  if (!info.is_object()) throw Error(what + ": entry is a " + info.type_name() + ", not an object");
  Entry entry;
  entry.name = name;

  const Json& dtype = field(info, "dtype", what);
  if (!dtype.is_string()) throw Error(what + ": \"dtype\" is a " + dtype.type_name() + ", not a string");
  const auto& dtype_text = dtype.as_string();
  if (dtype_text == "F32") {
    entry.dtype = DType::f32;
  } else if (dtype_text == "F16") {
    entry.dtype = DType::f16;
  } else if (dtype_text == "BF16") {
    entry.dtype = DType::bf16;
  } else {
    throw Error(what + ": unsupported dtype " + detail::quoted(dtype_text) + " (supported: F32, F16, BF16)");
  }

  const Json& shape = field(info, "shape", what);
  if (!shape.is_array()) throw Error(what + ": \"shape\" is a " + shape.type_name() + ", not an array");
  if (shape.as_array().size() > detail::kMaxRank) {
    throw Error(what + ": rank " + std::to_string(shape.as_array().size()) + " exceeds the maximum of " +
                std::to_string(detail::kMaxRank));
  }
  for (const Json& d : shape.as_array()) {
    const std::uint64_t dim = to_uint(d, what + ": \"shape\"");
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw Error(what + ": dimension " + std::to_string(dim) + " does not fit in 63 bits");
    }
    entry.shape.push_back(static_cast<std::int64_t>(dim));
  }
  const std::size_t nbytes = detail::checked_nbytes(entry.shape, entry.dtype, what);

  const Json& offsets = field(info, "data_offsets", what);
  if (!offsets.is_array() || offsets.as_array().size() != 2) {
    throw Error(what + ": \"data_offsets\" is not an array [begin, end]");
  }
  entry.begin = to_uint(offsets.as_array()[0], what + ": \"data_offsets\"");
  entry.end = to_uint(offsets.as_array()[1], what + ": \"data_offsets\"");
  const std::string span_text = "data_offsets [" + std::to_string(entry.begin) + ", " +
                                std::to_string(entry.end) + "]";
  if (entry.begin > entry.end) throw Error(what + ": " + span_text + " have begin > end");
  if (entry.end > data_size) {
    throw Error(what + ": " + span_text + " out of range: the data section has " +
                std::to_string(data_size) + " bytes");
  }
  if (entry.end - entry.begin != nbytes) {
    throw Error(what + ": size mismatch: " + span_text + " span " + std::to_string(entry.end - entry.begin) +
                " bytes but shape " + detail::shape_text(entry.shape) + " (" + dtype_name(entry.dtype) +
                ") needs " + std::to_string(nbytes));
  }
  return entry;
}

void check_metadata(const Json& metadata, const std::string& source) {
  const auto is_string = [](const auto& member) { return member.second.is_string(); };
  const bool strings = metadata.is_object() &&
                       std::all_of(metadata.as_object().begin(), metadata.as_object().end(), is_string);
  if (!strings) throw Error(source + ": \"__metadata__\" must be an object of strings");
}

// A gap or overlap between tensors, or bytes after the last, means the header and data disagree.
void check_tiling(std::vector<Entry>& entries, std::uint64_t data_size, const std::string& source) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  std::uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      throw Error(source + ": tensor " + detail::quoted(e.name) + " overlaps the bytes of another tensor");
    }
    if (e.begin > covered) {
      throw Error(source + ": data bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                  ") before tensor " + detail::quoted(e.name) + " belong to no tensor");
    }
    covered = e.end;
  }
  if (covered != data_size) {
    throw Error(source + ": extra data: " + std::to_string(data_size - covered) +
                " bytes after the last tensor belong to no tensor");
  }
}

// The header's length from the first 8 bytes of a file of `file_size` bytes.
std::uint64_t header_length_of(std::span<const std::uint8_t> bytes, std::uint64_t file_size,
                               const std::string& source) {
  if (file_size < 8) {
    throw Error(source + ": truncated header: " + std::to_string(file_size) +
                " bytes is too short for the 8-byte header length");
  }
  // A .npy file given for a .safetensors one would read as a header length near 2^48: named instead.
  constexpr std::string_view kNpyMagic = "\x93NUMPY";
  if (std::memcmp(bytes.data(), kNpyMagic.data(), kNpyMagic.size()) == 0) {
    throw Error(source + ": a .npy file (it begins with numpy's magic \\x93NUMPY), not a .safetensors file");
  }
  std::uint64_t header_length = 0;
  for (std::size_t i = 0; i < 8; ++i) header_length |= std::uint64_t{bytes[i]} << (8 * i);
  // The reference implementation's own limit; also the bound on what a hostile length makes us allocate.
  constexpr std::uint64_t kMaxHeader = 100'000'000;
  if (header_length > kMaxHeader) {
    throw Error(source + ": header length " + std::to_string(header_length) + " exceeds the format's limit of " +
                std::to_string(kMaxHeader) + " bytes");
  }
  if (header_length > file_size - 8) {
    throw Error(source + ": header length " + std::to_string(header_length) + " exceeds the " +
                std::to_string(file_size - 8) + " bytes after the length field");
  }
  return header_length;
}

// The entries of a JSON header, checked against a data section of `data_size` bytes, sorted by offset.
std::vector<Entry> parse_header(std::span<const std::uint8_t> header_bytes, std::uint64_t data_size,
                                const std::string& source) {
  Json header;
  try {
    header = Json::parse({reinterpret_cast<const char*>(header_bytes.data()), header_bytes.size()});
  } catch (const JsonError& e) {
    throw Error(source + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) {
    throw Error(source + ": header is a JSON " + header.type_name() + ", not an object");
  }
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.as_object()) {
    if (name == "__metadata__") {
      check_metadata(info, source);
    } else {
      entries.push_back(parse_entry(name, info, data_size, source));
    }
  }
  check_tiling(entries, data_size, source);
  return entries;
}

}  // namespace

std::map<std::string, HostTensor> parse_safetensors(std::span<const std::uint8_t> bytes,
                                                    const std::string& source) {
  const std::uint64_t header_length = header_length_of(bytes, bytes.size(), source);
  const auto data = bytes.subspan(8 + header_length);
  std::map<std::string, HostTensor> tensors;
  for (Entry& e : parse_header(bytes.subspan(8, header_length), data.size(), source)) {
    const auto span = data.subspan(e.begin, e.end - e.begin);
    tensors.emplace(std::move(e.name), HostTensor{e.dtype, std::move(e.shape), {span.begin(), span.end()}});
  }
  return tensors;
}

std::map<std::string, HostTensor> read_safetensors(const std::string& path) {
  // The header is read and checked against the file's size first; each tensor's bytes are then read
  // straight into it.
  const detail::InputFile file(path);
  const std::uint64_t header_length = header_length_of(file.read(0, std::min<std::uint64_t>(file.size(), 8)),
                                                       file.size(), path);
  const std::uint64_t data_start = 8 + header_length;
  std::map<std::string, HostTensor> tensors;
  for (Entry& e : parse_header(file.read(8, header_length), file.size() - data_start, path)) {
    std::vector<std::uint8_t> bytes = file.read(data_start + e.begin, e.end - e.begin);
    tensors.emplace(std::move(e.name), HostTensor{e.dtype, std::move(e.shape), std::move(bytes)});
  }
  return tensors;
}

namespace detail {

FileBytes safetensors_bytes(const std::string& path, const std::map<std::string, const HostTensor*>& tensors) {
  check_path(path, "output");  // first: any other message names the path, and would end at its NUL
  // The data follows the map's (sorted) name order, so the offsets grow with the names.
  Json header = Json::object();
  FileBytes bytes;
  std::uint64_t offset = 0;
  for (const auto& [name, pointer] : tensors) {
    const HostTensor& tensor = *pointer;
    const std::string what = path + ": tensor " + quoted(name);
    if (name == "__metadata__") throw Error(what + ": the name is reserved for the file's metadata");
    const std::size_t nbytes = checked_nbytes(tensor.shape, tensor.dtype, what);
    if (tensor.bytes.size() != nbytes) {
      throw Error(what + ": holds " + std::to_string(tensor.bytes.size()) + " bytes but shape " +
                  shape_text(tensor.shape) + " (" + dtype_name(tensor.dtype) + ") needs " + std::to_string(nbytes));
    }
    header[name] = Json::object({{"dtype", safetensors_dtype(tensor.dtype)},
                                 {"shape", tensor.shape},
                                 {"data_offsets", Json::array({offset, offset + nbytes})}});
    offset += nbytes;
    bytes.data.push_back(tensor.bytes);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const JsonError& e) {  // a name that is not valid UTF-8
    throw Error(path + ": cannot encode the header: " + e.what());
  }
  // The format pads the header with spaces so the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  for (int i = 0; i < 8; ++i) bytes.head += static_cast<char>(std::uint64_t{text.size()} >> (8 * i));
  bytes.head += text;
  return bytes;
}

}  // namespace detail

void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  std::map<std::string, const HostTensor*> borrowed;
  for (const auto& [name, tensor] : tensors) borrowed.emplace(name, &tensor);
  detail::write_file_atomically(path, detail::safetensors_bytes(path, borrowed));
}

}  // namespace pasa::io
