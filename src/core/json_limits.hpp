// Reading JSON from files without letting its nesting reach the stack. nlohmann's parser and
// destructor are iterative, but copying or printing a value recurses once per level: 100,000
// nested lists crashed `attnsuite report` (a segmentation fault) and, in a suite file, overflowed
// the stack in GCC's ASan build. Files of ours are at most 4 levels deep.
#pragma once

#include <nlohmann/json.hpp>

namespace attnsuite {

inline constexpr int kMaxJsonDepth = 32;

// A callback for nlohmann::json::parse that calls too_deep() (which must throw) once a value
// lies deeper than kMaxJsonDepth.
template <class OnTooDeep>
nlohmann::json::parser_callback_t json_depth_limit(OnTooDeep too_deep) {
  return [too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth) too_deep();
    return true;
  };
}

}  // namespace attnsuite
