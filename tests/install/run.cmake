# ctest's install:find_package (tests/CMakeLists.txt): cmake -DFUSE_SOURCE_DIR=.. -DFUSE_BINARY_DIR=..
# -DWORK_DIR=.. -DGENERATOR=.. -DCXX_COMPILER=.. [-DCXX_COMPILER_LAUNCHER=..] -P run.cmake
# Installs the build into WORK_DIR/prefix, builds tests/install/ against it in WORK_DIR/consumer
# and runs its gaussian_demo and the installed fusec.
cmake_minimum_required(VERSION 3.25)

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "${command}\nfailed (${status}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer ${WORK_DIR}/consumer)
file(REMOVE_RECURSE ${WORK_DIR})

step(${CMAKE_COMMAND} --build ${FUSE_BINARY_DIR} --target fuse_installable -j 1)
step(${CMAKE_COMMAND} --install ${FUSE_BINARY_DIR} --prefix ${prefix})

set(launcher "")
if(CXX_COMPILER_LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_COMPILER_LAUNCHER})
endif()
step(${CMAKE_COMMAND} -S ${FUSE_SOURCE_DIR}/tests/install -B ${consumer} -G ${GENERATOR}
     -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER} ${launcher}
     -DCMAKE_PREFIX_PATH=${prefix} -DFUSE_EXAMPLE=${FUSE_SOURCE_DIR}/examples/gaussian_demo.cpp)
step(${CMAKE_COMMAND} --build ${consumer} -j 1)

step(${consumer}/gaussian_demo)
if(NOT step_output MATCHES "after the passes:" OR NOT step_output MATCHES "y \\(fuse\\)")
  message(FATAL_ERROR "gaussian_demo printed:\n${step_output}")
endif()
message(STATUS "gaussian_demo built against ${prefix} ran:\n${step_output}")

step(${prefix}/bin/fuse-run --help)
if(EXISTS ${prefix}/bin/fusec)
  step(${prefix}/bin/fusec --version)
  message(STATUS "installed ${step_output}")
endif()
