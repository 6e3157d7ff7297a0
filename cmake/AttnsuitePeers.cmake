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
# One CUDA stack per process. A process holds one copy of each soname (libcudart.so.13,
# libcublas.so.13, libcudnn.so.9, libnccl.so.2), whichever loads first, and libtorch_cuda needs
# those of the torch wheel (PyPI's nvidia-* packages, which torch was built and tested with;
# NCCL and cuDNN there are newer than the CUDA toolkit's). So where the build's Python has a
# torch for the toolkit's CUDA major version, attnsuite's programs (the CLI, the Python module,
# the tests) look in torch's directories first (ATTNSUITE_TORCH_RUNTIME_DIRS, put first in their
# run path by src/peers/CMakeLists.txt) whether or not the torch peers are built: the module meets
# torch in the drop-in's processes either way. The cuDNN peer is then built against torch's
# cuDNN, and NCCL is never linked (src/cuda/CMakeLists.txt). A torch for another CUDA major
# version would bring a second CUDA runtime into the process: the torch peers are skipped then,
# with a message.
#
# Results:
#   ATTNSUITE_HAVE_CUDNN_PEER, ATTNSUITE_CUDNN_INCLUDE_DIRS, ATTNSUITE_CUDNN_LIBRARY
#   ATTNSUITE_HAVE_TORCH_PEERS, ATTNSUITE_TORCH_LIBRARIES (a target: link it PRIVATE to the peer only),
#   ATTNSUITE_TORCH_RUNTIME_DIRS (torch's lib directory and its wheels' CUDA library directories;
#   empty without a torch for this CUDA)

set(ATTNSUITE_CUDNN_PEER AUTO CACHE STRING "Build the cuDNN SDPA peer: AUTO, ON or OFF")
set_property(CACHE ATTNSUITE_CUDNN_PEER PROPERTY STRINGS AUTO ON OFF)
set(ATTNSUITE_TORCH AUTO CACHE STRING "Build the PyTorch (libtorch) peers: AUTO, ON or OFF")
set_property(CACHE ATTNSUITE_TORCH PROPERTY STRINGS AUTO ON OFF)

# The packages (torch, cudnn-frontend) are looked up in the environment of the interpreter the
# build is for (AttnsuitePython.cmake), else of the first python3 on the PATH.
if(ATTNSUITE_PYTHON_EXECUTABLE)
  set(ATTNSUITE_PYTHON3 ${ATTNSUITE_PYTHON_EXECUTABLE})
else()
  find_program(ATTNSUITE_PYTHON3 NAMES python3 python)
endif()
# Under `pip install .` the build runs in pip's isolated build environment, whose PYTHONPATH hides
# the target environment's site-packages (where torch is) from child interpreters.
set(attnsuite_python_env "")
if(SKBUILD)
  set(attnsuite_python_env ${CMAKE_COMMAND} -E env --unset=PYTHONPATH)
endif()

# Runs a Python one-liner; sets out to its stripped stdout, or to "" when it fails.
function(attnsuite_python_query out code)
  set(value "")
  if(ATTNSUITE_PYTHON3)
    execute_process(COMMAND ${attnsuite_python_env} ${ATTNSUITE_PYTHON3} -c "${code}"
                    OUTPUT_VARIABLE value OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                    RESULT_VARIABLE status TIMEOUT 60)
    if(NOT status EQUAL 0)
      set(value "")
    endif()
  endif()
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

# attnsuite_peer_not_found(OPTION TEXT...): the texts are one message, concatenated.
function(attnsuite_peer_not_found option)
  string(CONCAT what ${ARGN})
  if(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option}=ON but ${what}")
  endif()
  message(STATUS "attnsuite: peer skipped (${option}=${${option}}): ${what}")
endfunction()

# --- PyTorch's CUDA libraries --------------------------------------------------------------------
# Where the build's Python has torch (<site-packages>/torch; find_spec locates it without
# importing torch, which takes seconds and initializes CUDA libraries), or Torch_DIR's.
set(ATTNSUITE_TORCH_PACKAGE_DIR "")
if(Torch_DIR)
  get_filename_component(ATTNSUITE_TORCH_PACKAGE_DIR ${Torch_DIR}/../../.. ABSOLUTE)
else()
  attnsuite_python_query(ATTNSUITE_TORCH_PACKAGE_DIR
    "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])")
endif()
# The CUDA version torch was built for ("13.2"; empty for a CPU torch), from torch/version.py.
set(ATTNSUITE_TORCH_CUDA "")
if(ATTNSUITE_TORCH_PACKAGE_DIR AND EXISTS ${ATTNSUITE_TORCH_PACKAGE_DIR}/version.py)
  file(STRINGS ${ATTNSUITE_TORCH_PACKAGE_DIR}/version.py cuda_line REGEX "^cuda[: ].*=")
  if(cuda_line MATCHES "'([0-9]+\\.[0-9]+)'")
    set(ATTNSUITE_TORCH_CUDA ${CMAKE_MATCH_1})
  endif()
endif()
string(REGEX MATCH "^[0-9]+" torch_cuda_major "${ATTNSUITE_TORCH_CUDA}")
# Where its CUDA libraries are: PyPI's torch keeps them in the nvidia-* wheels beside it
# (<site-packages>/nvidia/<package>/lib, libtorch_cuda's own RPATH); other installs (conda, a
# source build) leave only torch's lib directory here.
set(ATTNSUITE_TORCH_RUNTIME_DIRS "")
set(ATTNSUITE_TORCH_CUDNN_DIR "")
if(torch_cuda_major AND torch_cuda_major STREQUAL CUDAToolkit_VERSION_MAJOR)
  get_filename_component(torch_site_packages ${ATTNSUITE_TORCH_PACKAGE_DIR} DIRECTORY)
  file(GLOB torch_cuda_dirs LIST_DIRECTORIES true ${torch_site_packages}/nvidia/*/lib)
  set(ATTNSUITE_TORCH_RUNTIME_DIRS ${ATTNSUITE_TORCH_PACKAGE_DIR}/lib)
  foreach(dir ${torch_cuda_dirs})
    if(IS_DIRECTORY ${dir})
      list(APPEND ATTNSUITE_TORCH_RUNTIME_DIRS ${dir})
    endif()
  endforeach()
  if(IS_DIRECTORY ${torch_site_packages}/nvidia/cudnn/include)
    set(ATTNSUITE_TORCH_CUDNN_DIR ${torch_site_packages}/nvidia/cudnn)
  endif()
  list(LENGTH ATTNSUITE_TORCH_RUNTIME_DIRS dir_count)
  message(STATUS "attnsuite: torch's CUDA ${ATTNSUITE_TORCH_CUDA} libraries first in the run path "
                 "(${dir_count} directories under ${torch_site_packages}; CUDA toolkit ${CUDAToolkit_VERSION})")
endif()

# --- PyTorch peers -------------------------------------------------------------------------------
# In a function: what torch's config sets stays local. Its CUDA architecture list is fixed so it
# never probes a GPU; its STATUS lines and warnings (e.g. "kineto not found") are muted.
function(attnsuite_find_torch)
  set(TORCH_CUDA_ARCH_LIST "9.0a;8.0")
  unset(CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_MESSAGE_LOG_LEVEL ERROR)
  if(NOT Torch_DIR AND ATTNSUITE_TORCH_PACKAGE_DIR)
    list(APPEND CMAKE_PREFIX_PATH ${ATTNSUITE_TORCH_PACKAGE_DIR}/share/cmake)
  endif()
  find_package(Torch QUIET)
  set(ATTNSUITE_TORCH_FOUND ${Torch_FOUND} PARENT_SCOPE)
  set(ATTNSUITE_TORCH_VERSION ${Torch_VERSION} PARENT_SCOPE)
  set(ATTNSUITE_TORCH_INSTALL_PREFIX ${TORCH_INSTALL_PREFIX} PARENT_SCOPE)
endfunction()

set(ATTNSUITE_HAVE_TORCH_PEERS OFF)
if(NOT ATTNSUITE_TORCH STREQUAL "OFF" AND torch_cuda_major
   AND NOT torch_cuda_major STREQUAL CUDAToolkit_VERSION_MAJOR)
  # Decided before torch's CMake config runs: with another CUDA it may stop the configure.
  attnsuite_peer_not_found(ATTNSUITE_TORCH
    "the torch in ${ATTNSUITE_TORCH_PACKAGE_DIR} is built for CUDA ${ATTNSUITE_TORCH_CUDA} and the CUDA "
    "toolkit is ${CUDAToolkit_VERSION}: one process would load two CUDA runtimes (install a torch for "
    "CUDA ${CUDAToolkit_VERSION_MAJOR}, or build with a CUDA ${torch_cuda_major} toolkit)")
elseif(NOT ATTNSUITE_TORCH STREQUAL "OFF")
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
      "libtorch not found (${ATTNSUITE_PYTHON3} -c 'import torch' must work, or set Torch_DIR)")
  endif()
endif()

# --- cuDNN SDPA ---------------------------------------------------------------------------------
set(ATTNSUITE_HAVE_CUDNN_PEER OFF)
if(NOT ATTNSUITE_CUDNN_PEER STREQUAL "OFF")
  # cudnn-frontend is header-only; the PyPI wheel puts its headers in <site-packages>/include.
  # importlib.metadata finds them without importing the package (whose Python deps are not needed).
  attnsuite_python_query(frontend_hint
    "import importlib.metadata as m; print(m.distribution('nvidia-cudnn-frontend').locate_file('include'))")
  find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${frontend_hint} ENV CUDNN_FRONTEND_INCLUDE_DIR
            DOC "Directory with cudnn_frontend.h (PyPI nvidia-cudnn-frontend)")
  # cuDNN itself: where the build's Python has torch for this CUDA, torch's (the nvidia-cudnn
  # wheel: the copy the process loads, see above); else the toolkit's copy, the Debian package's
  # (include/x86_64-linux-gnu), or that wheel.
  attnsuite_python_query(cudnn_wheel
    "import importlib.util as u; print(u.find_spec('nvidia.cudnn').submodule_search_locations[0])")
  if(ATTNSUITE_TORCH_CUDNN_DIR)
    # Cache entries of their own, so that a build directory configured before torch was
    # installed does not keep another cuDNN's header or library.
    find_path(ATTNSUITE_TORCH_CUDNN_INCLUDE_DIR cudnn.h PATHS ${ATTNSUITE_TORCH_CUDNN_DIR}/include NO_DEFAULT_PATH)
    find_library(ATTNSUITE_TORCH_CUDNN_LIBRARY NAMES libcudnn.so.9 cudnn PATHS ${ATTNSUITE_TORCH_CUDNN_DIR}/lib
                 NO_DEFAULT_PATH)
    set(cudnn_include_dir ${ATTNSUITE_TORCH_CUDNN_INCLUDE_DIR})
    set(cudnn_library ${ATTNSUITE_TORCH_CUDNN_LIBRARY})
  else()
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${cudnn_wheel}/include ENV CUDNN_ROOT
              PATH_SUFFIXES include)
    # NAMES_PER_DIR: the wheel ships libcudnn.so.9 only, and a libcudnn.so on the system path must
    # not win over it.
    find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR HINTS ${CUDAToolkit_LIBRARY_DIR}
                 ${cudnn_wheel}/lib ENV CUDNN_ROOT PATH_SUFFIXES lib lib64)
    set(cudnn_include_dir ${CUDNN_INCLUDE_DIR})
    set(cudnn_library ${CUDNN_LIBRARY})
  endif()
  set(cudnn_version "")
  if(cudnn_include_dir AND EXISTS ${cudnn_include_dir}/cudnn_version.h)
    file(STRINGS ${cudnn_include_dir}/cudnn_version.h version_lines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    foreach(part MAJOR MINOR PATCHLEVEL)
      string(REGEX MATCH "CUDNN_${part} ([0-9]+)" _ "${version_lines}")
      list(APPEND cudnn_version ${CMAKE_MATCH_1})
    endforeach()
    list(JOIN cudnn_version "." cudnn_version)
  endif()
  if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
    attnsuite_peer_not_found(ATTNSUITE_CUDNN_PEER
      "cudnn_frontend.h not found (python3 -m pip install --no-deps nvidia-cudnn-frontend, or set CUDNN_FRONTEND_INCLUDE_DIR)")
  elseif(NOT cudnn_include_dir OR NOT cudnn_library)
    attnsuite_peer_not_found(ATTNSUITE_CUDNN_PEER "cuDNN (cudnn.h and libcudnn) not found (set CUDNN_ROOT)")
  elseif(cudnn_version VERSION_LESS 9.0)
    attnsuite_peer_not_found(ATTNSUITE_CUDNN_PEER "cuDNN ${cudnn_version} found; the SDPA peer needs cuDNN 9")
  else()
    set(ATTNSUITE_HAVE_CUDNN_PEER ON)
    set(ATTNSUITE_CUDNN_INCLUDE_DIRS ${CUDNN_FRONTEND_INCLUDE_DIR} ${cudnn_include_dir})
    set(ATTNSUITE_CUDNN_LIBRARY ${cudnn_library})
    file(STRINGS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h frontend_lines
         REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION ")
    string(REGEX REPLACE "[^0-9]+([0-9]+)[^0-9]+([0-9]+)[^0-9]+([0-9]+).*" "\\1.\\2.\\3" frontend_version "${frontend_lines}")
    message(STATUS "attnsuite: cuDNN SDPA peer: cuDNN ${cudnn_version} (${cudnn_library}), "
                   "cudnn-frontend ${frontend_version} (${CUDNN_FRONTEND_INCLUDE_DIR})")
  endif()
endif()
