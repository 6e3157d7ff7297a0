# Writes ${OUTPUT}: a C++ definition `std::string_view ${SYMBOL}()` in namespace ${NAMESPACE}
# returning the text of ${INPUT}. Run at build time (cmake -P) so editing the file rebuilds it.
file(READ ${INPUT} text)
get_filename_component(name ${INPUT} NAME)
set(content "// Generated from ${name} by cmake/EmbedText.cmake. Do not edit.
#include <string_view>

namespace ${NAMESPACE} {

std::string_view ${SYMBOL}() {
  static constexpr std::string_view text = R\"attnsuite_text(${text})attnsuite_text\";
  return text;
}

}  // namespace ${NAMESPACE}
")
file(WRITE ${OUTPUT}.tmp "${content}")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
