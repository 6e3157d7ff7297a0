# Writes ${OUTPUT}: src/report/plots.py as a C++ string, so `attnsuite report --plots` runs the
# plotting script from any directory and an installed binary. Run at build time (cmake -P).
file(READ ${SCRIPT} text)
set(content "// Generated from src/report/plots.py by cmake/EmbedPlots.cmake. Do not edit.
#include \"report/plots.hpp\"

namespace attnsuite::report {

std::string_view plots_script() {
  static constexpr std::string_view kScript = R\"attnsuite_plots(${text})attnsuite_plots\";
  return kScript;
}

}  // namespace attnsuite::report
")
file(WRITE ${OUTPUT}.tmp "${content}")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
