# cmake --install BUILD --prefix P: the static libraries, their public headers under
# include/fuse/ (so `#include "frontends/api.h"` works as it does in the tree), fusec, fuse-run,
# and the fuse CMake package, which a project uses as
#   find_package(fuse REQUIRED)
#   target_link_libraries(app PRIVATE fuse::fuse)     # fuse::render too, to draw SVG/PNG
# tests/install/ is such a project, built against a fresh prefix by `ctest -R install`.
include(CMakePackageConfigHelpers)

set(FUSE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/fuse)

# Static libraries carry their private dependencies (MLIR, LLVM, Threads, dl; libgvc for
# fuse_render) as $<LINK_ONLY:...>: fuseConfig.cmake finds them again.
install(TARGETS fuse_ir fuse_passes fuse_codegen fuse_runtime fuse_frontends fuse
        EXPORT fuseTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT fuseTargets NAMESPACE fuse:: DESTINATION ${FUSE_INSTALL_CMAKEDIR})
# Separate, so that a consumer without Graphviz still finds fuse::fuse.
install(TARGETS fuse_render EXPORT fuseRenderTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT fuseRenderTargets NAMESPACE fuse:: DESTINATION ${FUSE_INSTALL_CMAKEDIR})

# The installed executables find libMLIR/libLLVM where they were linked from.
foreach(tool fusec fuse-run)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

# .def: X-macro tables that headers include (ir/scalar_ops.def).
install(DIRECTORY ir passes runtime DESTINATION ${FUSE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
install(DIRECTORY frontends DESTINATION ${FUSE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.def"
        PATTERN fusec EXCLUDE PATTERN fuse-run EXCLUDE PATTERN python EXCLUDE)
# codegen's plain C++ interface; the emitters and scalar_lowering.h include MLIR and stay inside
# codegen/.
install(FILES codegen/cpu_codegen.h codegen/cpu_object.h codegen/cuda_codegen.h
        DESTINATION ${FUSE_INSTALL_INCLUDEDIR}/codegen)

configure_package_config_file(cmake/fuseConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/fuseConfig.cmake
                              INSTALL_DESTINATION ${FUSE_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fuseConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fuseConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/fuseConfigVersion.cmake
        DESTINATION ${FUSE_INSTALL_CMAKEDIR})

# What `cmake --install` needs built: `cmake --build BUILD --target fuse_installable`.
add_custom_target(fuse_installable)
add_dependencies(fuse_installable fuse_ir fuse_passes fuse_codegen fuse_runtime fuse_frontends
                 fuse_render fuse-run)
if(TARGET fusec)
  add_dependencies(fuse_installable fusec)
endif()
