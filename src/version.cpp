#include "pasa/version.h"

namespace pasa {

const char* version() { return PASA_VERSION; }  // defined by CMake from project(VERSION)

}  // namespace pasa
