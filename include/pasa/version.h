// SPDX-License-Identifier: Apache-2.0
// pasa/version.h — the library's version: CMake's project(VERSION), the one source that the CLI's
// --version, the Python package's __version__ (and its wheel metadata) and the JSON outputs read.
#pragma once

namespace pasa {

const char* version();  // e.g. "0.1.0"

}  // namespace pasa
