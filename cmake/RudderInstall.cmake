# `cmake --install`: headers, librudder.so, the CLI, the first-party plugins, the bundled models, the Python
# binding, the CMake package (find_package(Rudder CONFIG): Rudder::plugin_sdk, Rudder::plugin_json, Rudder::rudder,
# rudder_add_controller())
# and rudder.pc. Every installed path is relative to the prefix, so the package works wherever --prefix puts it.
include(CMakePackageConfigHelpers)

install(TARGETS rudder_plugin_sdk rudder_plugin_json rudder_embed EXPORT RudderTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES sdk/include/rudder/rudder_plugin.h sdk/include/rudder/rudder_controller.hpp sdk/include/rudder/rudder_json.hpp
              host/embed/include/rudder/rudder.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rudder)
install(TARGETS rudder RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The plugin scanner: the CLI and librudder.so run it to scan each plugin library in a child process. The CLI's
# helper programs: rudder runs serve, train and eval in them (host/cli).
install(TARGETS rudder_plugin_scan rudder_controller_host rudder_serve_command rudder_train_command rudder_eval_command
        RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/rudder)
# Every first-party controller library (controllers/CMakeLists.txt lists them in RUDDER_FIRST_PARTY_PLUGINS).
install(TARGETS ${RUDDER_FIRST_PARTY_PLUGINS} LIBRARY DESTINATION ${RUDDER_INSTALL_PLUGIN_DIR})
# Model files only: a trained model's training checkpoint stays in the source tree.
install(DIRECTORY models/ DESTINATION ${RUDDER_INSTALL_MODEL_DIR} PATTERN checkpoint EXCLUDE)
install(DIRECTORY examples/recipes DESTINATION ${CMAKE_INSTALL_DATADIR}/rudder/examples)
# The Python binding finds librudder.so three folders up from its package: <prefix>/<libdir>/rudder/python/rudder.
install(DIRECTORY python/rudder DESTINATION ${CMAKE_INSTALL_LIBDIR}/rudder/python PATTERN __pycache__ EXCLUDE)

install(EXPORT RudderTargets NAMESPACE Rudder:: DESTINATION ${RUDDER_INSTALL_CMAKE_DIR})
configure_package_config_file(cmake/RudderConfig.cmake.in ${PROJECT_BINARY_DIR}/RudderConfig.cmake
  INSTALL_DESTINATION ${RUDDER_INSTALL_CMAKE_DIR}
  PATH_VARS RUDDER_INSTALL_PLUGIN_DIR RUDDER_INSTALL_MODEL_DIR CMAKE_INSTALL_BINDIR)
# Same major = compatible, as for the plugin ABI and the C API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/RudderConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/RudderConfig.cmake ${PROJECT_BINARY_DIR}/RudderConfigVersion.cmake
              sdk/cmake/RudderController.cmake sdk/cmake/rudder_plugin.map
        DESTINATION ${RUDDER_INSTALL_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own folder, so it too survives `cmake --install --prefix`.
file(RELATIVE_PATH RUDDER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/rudder.pc.in ${PROJECT_BINARY_DIR}/rudder.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/rudder.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
