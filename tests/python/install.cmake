# ctest's python:install (tests/python/CMakeLists.txt): installs the Python package of the build
# FUSE_BINARY_DIR into WORK_DIR/prefix (cmake --install --component python), then imports it with
# PYTHON from WORK_DIR (not the source or build tree) and runs a jitted function.
cmake_minimum_required(VERSION 3.25)
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

execute_process(COMMAND ${CMAKE_COMMAND} --install ${FUSE_BINARY_DIR} --component python --prefix ${prefix}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install failed:\n${out}")
endif()

set(script [=[
import os, sys
import numpy as np
import fuse
assert fuse.__file__.startswith(sys.argv[1]), fuse.__file__
f = fuse.jit(lambda x: fuse.exp(x) * 2)
x = np.linspace(0, 1, 7, dtype=np.float32)
np.testing.assert_allclose(f(x), np.exp(x) * 2, rtol=1e-6)
print("installed fuse at", os.path.dirname(fuse.__file__), "ran")
]=])
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${prefix}/${SITE_DIR} PYTHONNOUSERSITE=1
                        ${PYTHON} -c "${script}" ${prefix}
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the installed package failed:\n${out}")
endif()
message(STATUS "${out}")
