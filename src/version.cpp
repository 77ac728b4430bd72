// SPDX-License-Identifier: Apache-2.0
#include "pasa/version.h"

namespace pasa {

const char* version() { return PASA_VERSION; }  // defined by CMake from project(VERSION)

}  // namespace pasa
