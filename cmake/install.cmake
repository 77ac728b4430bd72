# SPDX-License-Identifier: Apache-2.0
# Installs pasa as a CMake package: headers, the static library, and pasaConfig.cmake, so a project
# can `find_package(pasa CONFIG REQUIRED)` and `target_link_libraries(app PRIVATE pasa::core)`.
include(CMakePackageConfigHelpers)

set(PASA_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pasa)
install(TARGETS pasa_core EXPORT pasaTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/pasa DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT pasaTargets NAMESPACE pasa:: DESTINATION ${PASA_CMAKE_INSTALL_DIR})
configure_package_config_file(cmake/pasaConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/pasaConfig.cmake
                              INSTALL_DESTINATION ${PASA_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pasaConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pasaConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/pasaConfigVersion.cmake
        DESTINATION ${PASA_CMAKE_INSTALL_DIR})
if(PASA_BUILD_CLI)
  install(TARGETS pasa_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# (the license travels with the headers and the library, as the wheel carries it)
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/pasa)
