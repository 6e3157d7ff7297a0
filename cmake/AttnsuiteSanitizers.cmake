# ATTNSUITE_SANITIZE=address,undefined builds every host C++ file (library, CLI, tests) with
# those sanitizers. Every report is fatal: -fno-sanitize-recover=all makes UBSan abort like
# ASan, so a test that hits undefined behaviour fails instead of printing and passing.
# CUDA device code is left alone (nvcc takes no -fsanitize; compute-sanitizer covers it).
set(ATTNSUITE_SANITIZE "" CACHE STRING "Sanitizers for host code, e.g. address,undefined (empty: none)")
if(ATTNSUITE_SANITIZE)
  add_compile_options(
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ATTNSUITE_SANITIZE}>
    $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
    $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${ATTNSUITE_SANITIZE})
endif()
