# What the Python side needs. Two independent parts, each AUTO, ON or OFF (AUTO builds it when
# its dependencies are found, ON stops the configure when they are not):
#
#   ATTNSUITE_PYTHON       the module attnsuite._core (nanobind, PyPI) and the package around it,
#                          laid out in <build>/python/attnsuite so that PYTHONPATH=<build>/python
#                          imports it without installing; `pip install .` builds the same target
#                          through scikit-build-core (pyproject.toml), which sets it ON.
#   ATTNSUITE_ONNXRUNTIME  the ONNX Runtime peers: they drive onnxruntime's Python API through an
#                          embedded interpreter (the PyPI wheel ships libonnxruntime.so but no C
#                          headers, and Debian 12 packages no ONNX Runtime), so they need
#                          Python's embedding library; whether onnxruntime itself is installed is
#                          asked at run time (supports() says why not).
#
# Results: ATTNSUITE_HAVE_PYTHON_MODULE, ATTNSUITE_HAVE_ONNXRUNTIME_PEER, ATTNSUITE_PYTHON_EXECUTABLE.

set(ATTNSUITE_PYTHON AUTO CACHE STRING "Build the Python module attnsuite._core: AUTO, ON or OFF")
set_property(CACHE ATTNSUITE_PYTHON PROPERTY STRINGS AUTO ON OFF)
set(ATTNSUITE_ONNXRUNTIME AUTO CACHE STRING "Build the ONNX Runtime peers (embedded Python): AUTO, ON or OFF")
set_property(CACHE ATTNSUITE_ONNXRUNTIME PROPERTY STRINGS AUTO ON OFF)

set(ATTNSUITE_HAVE_PYTHON_MODULE OFF)
set(ATTNSUITE_HAVE_ONNXRUNTIME_PEER OFF)

function(attnsuite_python_not_found option what)
  if(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option}=ON but ${what}")
  endif()
  message(STATUS "attnsuite: ${option}=${${option}} skipped: ${what}")
endfunction()

if(NOT (ATTNSUITE_PYTHON STREQUAL "OFF" AND ATTNSUITE_ONNXRUNTIME STREQUAL "OFF"))
  # scikit-build-core passes the interpreter that runs the build as Python_EXECUTABLE.
  set(components Interpreter)
  if(NOT ATTNSUITE_PYTHON STREQUAL "OFF")
    list(APPEND components Development.Module)
  endif()
  if(NOT ATTNSUITE_ONNXRUNTIME STREQUAL "OFF")
    list(APPEND components OPTIONAL_COMPONENTS Development.Embed)
  endif()
  find_package(Python 3.9 COMPONENTS ${components})
  if(Python_Interpreter_FOUND)
    # The interpreter's real path (a pyenv shim would pick whatever version is selected at run time).
    execute_process(COMMAND ${Python_EXECUTABLE} -c "import sys; print(sys.executable)"
                    OUTPUT_VARIABLE ATTNSUITE_PYTHON_EXECUTABLE OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
endif()

if(NOT ATTNSUITE_PYTHON STREQUAL "OFF")
  if(NOT Python_Development.Module_FOUND)
    attnsuite_python_not_found(ATTNSUITE_PYTHON "Python's development headers were not found")
  else()
    execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir
                    OUTPUT_VARIABLE nanobind_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    find_package(nanobind CONFIG QUIET HINTS ${nanobind_hint})
    if(NOT nanobind_FOUND)
      attnsuite_python_not_found(ATTNSUITE_PYTHON
        "nanobind not found for ${ATTNSUITE_PYTHON_EXECUTABLE} (scripts/setup-python.sh installs it)")
    else()
      set(ATTNSUITE_HAVE_PYTHON_MODULE ON)
      message(STATUS "attnsuite: Python module: Python ${Python_VERSION} (${ATTNSUITE_PYTHON_EXECUTABLE}), nanobind ${nanobind_VERSION}")
    endif()
  endif()
endif()

if(NOT ATTNSUITE_ONNXRUNTIME STREQUAL "OFF")
  if(NOT Python_Development.Embed_FOUND)
    attnsuite_python_not_found(ATTNSUITE_ONNXRUNTIME "Python's embedding library (libpython) was not found")
  else()
    set(ATTNSUITE_HAVE_ONNXRUNTIME_PEER ON)
    message(STATUS "attnsuite: ONNX Runtime peers: embedded Python ${Python_VERSION} (${Python_LIBRARIES})")
  endif()
endif()
