# Finds what the peer backends (src/peers) need. Included from src/peers/CMakeLists.txt, never
# from the top level: PyTorch's CMake config rewrites CMAKE_CUDA_FLAGS (its own -gencode list)
# and sets CMAKE_CUDA_ARCHITECTURES to OFF in the scope that calls it, so find_package(Torch)
# runs inside a function here and none of that reaches the attnsuite target.
#
# Options (each AUTO, ON or OFF; AUTO builds the peer when its dependencies are found, ON stops
# the configure when they are not):
#   ATTNSUITE_CUDNN_PEER   cuDNN SDPA through the cudnn-frontend headers (PyPI
#                          nvidia-cudnn-frontend; or -DCUDNN_FRONTEND_INCLUDE_DIR=<dir>)
#   ATTNSUITE_TORCH        the PyTorch peers through libtorch (the Python torch install; or
#                          -DTorch_DIR=<site-packages>/torch/share/cmake/Torch)
#
# Results:
#   ATTNSUITE_HAVE_CUDNN_PEER, ATTNSUITE_CUDNN_INCLUDE_DIRS, ATTNSUITE_CUDNN_LIBRARY
#   ATTNSUITE_HAVE_TORCH_PEERS, ATTNSUITE_TORCH_LIBRARIES (a target: link it PRIVATE to the peer only)

set(ATTNSUITE_CUDNN_PEER AUTO CACHE STRING "Build the cuDNN SDPA peer: AUTO, ON or OFF")
set_property(CACHE ATTNSUITE_CUDNN_PEER PROPERTY STRINGS AUTO ON OFF)
set(ATTNSUITE_TORCH AUTO CACHE STRING "Build the PyTorch (libtorch) peers: AUTO, ON or OFF")
set_property(CACHE ATTNSUITE_TORCH PROPERTY STRINGS AUTO ON OFF)

find_program(ATTNSUITE_PYTHON3 NAMES python3 python)

# Runs a Python one-liner; sets out to its stripped stdout, or to "" when it fails.
function(attnsuite_python_query out code)
  set(value "")
  if(ATTNSUITE_PYTHON3)
    execute_process(COMMAND ${ATTNSUITE_PYTHON3} -c "${code}"
                    OUTPUT_VARIABLE value OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                    RESULT_VARIABLE status TIMEOUT 60)
    if(NOT status EQUAL 0)
      set(value "")
    endif()
  endif()
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

function(attnsuite_peer_not_found option what)
  if(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option}=ON but ${what}")
  endif()
  message(STATUS "attnsuite: peer skipped (${option}=${${option}}): ${what}")
endfunction()

# --- cuDNN SDPA ---------------------------------------------------------------------------------
set(ATTNSUITE_HAVE_CUDNN_PEER OFF)
if(NOT ATTNSUITE_CUDNN_PEER STREQUAL "OFF")
  # cudnn-frontend is header-only; the PyPI wheel puts its headers in <site-packages>/include.
  # importlib.metadata finds them without importing the package (whose Python deps are not needed).
  attnsuite_python_query(frontend_hint
    "import importlib.metadata as m; print(m.distribution('nvidia-cudnn-frontend').locate_file('include'))")
  find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${frontend_hint} ENV CUDNN_FRONTEND_INCLUDE_DIR
            DOC "Directory with cudnn_frontend.h (PyPI nvidia-cudnn-frontend)")
  # cuDNN itself: the toolkit's copy, the Debian package's (include/x86_64-linux-gnu), or the
  # nvidia-cudnn-cu13 wheel that PyTorch uses.
  attnsuite_python_query(cudnn_wheel
    "import importlib.util as u; print(u.find_spec('nvidia.cudnn').submodule_search_locations[0])")
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${cudnn_wheel}/include ENV CUDNN_ROOT
            PATH_SUFFIXES include)
  find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR} ${cudnn_wheel}/lib
               ENV CUDNN_ROOT PATH_SUFFIXES lib lib64)
  set(cudnn_version "")
  if(CUDNN_INCLUDE_DIR AND EXISTS ${CUDNN_INCLUDE_DIR}/cudnn_version.h)
    file(STRINGS ${CUDNN_INCLUDE_DIR}/cudnn_version.h version_lines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    foreach(part MAJOR MINOR PATCHLEVEL)
      string(REGEX MATCH "CUDNN_${part} ([0-9]+)" _ "${version_lines}")
      list(APPEND cudnn_version ${CMAKE_MATCH_1})
    endforeach()
    list(JOIN cudnn_version "." cudnn_version)
  endif()
  if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
    attnsuite_peer_not_found(ATTNSUITE_CUDNN_PEER
      "cudnn_frontend.h not found (python3 -m pip install --no-deps nvidia-cudnn-frontend, or set CUDNN_FRONTEND_INCLUDE_DIR)")
  elseif(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
    attnsuite_peer_not_found(ATTNSUITE_CUDNN_PEER "cuDNN (cudnn.h and libcudnn) not found (set CUDNN_ROOT)")
  elseif(cudnn_version VERSION_LESS 9.0)
    attnsuite_peer_not_found(ATTNSUITE_CUDNN_PEER "cuDNN ${cudnn_version} found; the SDPA peer needs cuDNN 9")
  else()
    set(ATTNSUITE_HAVE_CUDNN_PEER ON)
    set(ATTNSUITE_CUDNN_INCLUDE_DIRS ${CUDNN_FRONTEND_INCLUDE_DIR} ${CUDNN_INCLUDE_DIR})
    set(ATTNSUITE_CUDNN_LIBRARY ${CUDNN_LIBRARY})
    file(STRINGS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h frontend_lines
         REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION ")
    string(REGEX REPLACE "[^0-9]+([0-9]+)[^0-9]+([0-9]+)[^0-9]+([0-9]+).*" "\\1.\\2.\\3" frontend_version "${frontend_lines}")
    message(STATUS "attnsuite: cuDNN SDPA peer: cuDNN ${cudnn_version} (${CUDNN_LIBRARY}), "
                   "cudnn-frontend ${frontend_version} (${CUDNN_FRONTEND_INCLUDE_DIR})")
  endif()
endif()

# --- PyTorch ------------------------------------------------------------------------------------
# In a function: what torch's config sets stays local. Its CUDA architecture list is fixed so it
# never probes a GPU; its STATUS lines and warnings (e.g. "kineto not found") are muted.
function(attnsuite_find_torch)
  set(TORCH_CUDA_ARCH_LIST "9.0a;8.0")
  unset(CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_MESSAGE_LOG_LEVEL ERROR)
  if(NOT Torch_DIR)
    # torch.utils.cmake_prefix_path is <torch>/share/cmake; find_spec locates <torch> without
    # importing torch (an import takes seconds and initializes CUDA libraries).
    attnsuite_python_query(torch_dir
      "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])")
    if(torch_dir)
      list(APPEND CMAKE_PREFIX_PATH ${torch_dir}/share/cmake)
    endif()
  endif()
  find_package(Torch QUIET)
  set(ATTNSUITE_TORCH_FOUND ${Torch_FOUND} PARENT_SCOPE)
  set(ATTNSUITE_TORCH_VERSION ${Torch_VERSION} PARENT_SCOPE)
  set(ATTNSUITE_TORCH_INSTALL_PREFIX ${TORCH_INSTALL_PREFIX} PARENT_SCOPE)
endfunction()

set(ATTNSUITE_HAVE_TORCH_PEERS OFF)
if(NOT ATTNSUITE_TORCH STREQUAL "OFF")
  attnsuite_find_torch()
  if(ATTNSUITE_TORCH_FOUND AND TARGET torch_cuda_library)
    # libtorch_cuda (which brings libtorch_cpu, c10 and c10_cuda), not TORCH_LIBRARIES: that
    # adds libtorch.so, an umbrella that exports the std::filesystem and std::chrono::tzdb of the
    # newer libstdc++ it links statically; with it in the link, attnsuite's own
    # std::filesystem::remove_all bound to torch's copy and crashed.
    set(ATTNSUITE_TORCH_LIBRARIES torch_cuda_library)
    set(ATTNSUITE_HAVE_TORCH_PEERS ON)
    message(STATUS "attnsuite: PyTorch peers: libtorch ${ATTNSUITE_TORCH_VERSION} (${ATTNSUITE_TORCH_INSTALL_PREFIX})")
  elseif(ATTNSUITE_TORCH_FOUND)
    attnsuite_peer_not_found(ATTNSUITE_TORCH "the libtorch found has no CUDA (no torch_cuda_library target)")
  else()
    attnsuite_peer_not_found(ATTNSUITE_TORCH
      "libtorch not found (python3 -c 'import torch' must work, or set Torch_DIR)")
  endif()
endif()
