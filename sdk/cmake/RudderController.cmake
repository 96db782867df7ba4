# rudder_add_controller(<name> SOURCES <src>... [LIBRARIES <lib>...] [OUTPUT_DIRECTORY <dir>])
#
# Builds a controller plugin the way the host expects it: a MODULE library named rudder_<name>.so, compiled with
# hidden visibility and linked with a version script so that `rudder_plugin_entry` is the only exported symbol.
# Unresolved symbols are a link error (a plugin must not depend on the host's symbols), except under sanitizers
# whose runtime the host provides. Without OUTPUT_DIRECTORY the plugin goes to RUDDER_PLUGIN_OUTPUT_DIRECTORY
# when that is set (Rudder's own build), else to the usual library output directory.
function(rudder_add_controller name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  set(_RUDDER_PLUGIN_MAP "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/rudder_plugin.map")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "rudder_add_controller(${name}): SOURCES is required")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE Rudder::plugin_sdk ${ARG_LIBRARIES})
  set_target_properties(${name} PROPERTIES
    PREFIX "" OUTPUT_NAME "rudder_${name}"
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS "${_RUDDER_PLUGIN_MAP}")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(RUDDER_PLUGIN_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${RUDDER_PLUGIN_OUTPUT_DIRECTORY}")
  endif()
  if(NOT APPLE AND NOT WIN32)
    target_link_options(${name} PRIVATE "LINKER:--version-script=${_RUDDER_PLUGIN_MAP}")
    if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize" AND NOT RUDDER_SANITIZE)
      target_link_options(${name} PRIVATE "LINKER:--no-undefined")
    endif()
  endif()
endfunction()
