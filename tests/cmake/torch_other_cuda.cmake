# ctest (CUDA builds): a torch built for another CUDA major version than the toolkit's leaves the
# torch peers out with a configure message that says so, before torch's own CMake config runs
# (which may stop the configure on such a mismatch). A fake torch package (torch/version.py and
# nothing else, found through Torch_DIR) and -DATTNSUITE_TORCH=ON, which turns the message into
# the configure's error.
# cmake -DSOURCE=<repo> -DWORK=<scratch dir> -DTOOLKIT_MAJOR=<13> -DCUDA_COMPILER=<nvcc> -P torch_other_cuda.cmake
math(EXPR other "${TOOLKIT_MAJOR} - 1")
file(REMOVE_RECURSE ${WORK})
file(WRITE ${WORK}/site-packages/torch/version.py "__version__ = '2.15.0'\ncuda: Optional[str] = '${other}.8'\n")
file(MAKE_DIRECTORY ${WORK}/site-packages/torch/share/cmake/Torch)
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
          -DATTNSUITE_CUDA=ON -DATTNSUITE_TORCH=ON -DTorch_DIR=${WORK}/site-packages/torch/share/cmake/Torch
          -DATTNSUITE_CUDNN_PEER=OFF -DATTNSUITE_PYTHON=OFF -DATTNSUITE_ONNXRUNTIME=OFF -DATTNSUITE_TESTS=OFF
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(expected "ATTNSUITE_TORCH=ON but the torch in ${WORK}/site-packages/torch is built for CUDA ${other}.8 and the CUDA toolkit is ${TOOLKIT_MAJOR}.")
string(REPLACE "\n" " " all "${out} ${err}")
string(REGEX REPLACE " +" " " all "${all}")
if(status EQUAL 0 OR NOT all MATCHES "one process would load two CUDA runtimes")
  message(FATAL_ERROR "expected the configure to stop with the torch CUDA mismatch; exit ${status}:\n${out}\n${err}")
endif()
string(FIND "${all}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "expected '${expected}' in:\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${WORK})
