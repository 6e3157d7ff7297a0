# ATTNSUITE_FUZZ=ON builds the libFuzzer targets of tests/fuzz (clang only: libFuzzer is part of
# clang's runtime, Debian's libclang-rt-dev). Everything the targets link is compiled with
# coverage instrumentation (-fsanitize=fuzzer-no-link) so the fuzzer sees inside the library;
# combine with ATTNSUITE_SANITIZE=address,undefined so that a memory error or undefined
# behaviour is a finding, not only a crash. scripts/reliability.sh configures both.
option(ATTNSUITE_FUZZ "Build the libFuzzer targets in tests/fuzz (needs clang)" OFF)
if(ATTNSUITE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ATTNSUITE_FUZZ=ON needs clang (libFuzzer); this is ${CMAKE_CXX_COMPILER_ID}: "
                        "configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  # The coverage callbacks for everything else that links the library (CLI, tests).
  add_link_options(-fsanitize=fuzzer-no-link)
endif()
