# Writes ${OUTPUT}: a C++ table of every bench/suites/*.json|*.toml file's text.
# Run at build time (cmake -P) so editing a suite file rebuilds only this table.
file(GLOB suite_files ${SUITE_DIR}/*.json ${SUITE_DIR}/*.toml)
list(SORT suite_files)
set(entries "")
foreach(file ${suite_files})
  get_filename_component(name ${file} NAME_WE)
  get_filename_component(extension ${file} LAST_EXT)
  file(READ ${file} text)
  string(APPEND entries "    {\"${name}\", \"${extension}\", R\"attnsuite_suite(${text})attnsuite_suite\"},\n")
endforeach()
set(content "// Generated from bench/suites by cmake/EmbedSuites.cmake. Do not edit.
#include \"bench/embedded_suites.hpp\"

namespace attnsuite::bench {

namespace {
const EmbeddedSuite kSuites[] = {
${entries}};
}  // namespace

std::span<const EmbeddedSuite> embedded_suites() { return kSuites; }

}  // namespace attnsuite::bench
")
file(WRITE ${OUTPUT}.tmp "${content}")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
