// An enum's names as one table that serves both directions: to_string() looks a value up,
// parse_...() a name, so the two can never disagree.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace attnsuite {

template <class Enum>
struct EnumName {
  Enum value;
  std::string_view name;
};

// The name `table` gives `value`, else `fallback` (a value outside the enumerators).
template <class Enum, std::size_t N>
constexpr std::string_view name_of(const EnumName<Enum> (&table)[N], Enum value, std::string_view fallback) {
  for (const EnumName<Enum>& entry : table)
    if (entry.value == value) return entry.name;
  return fallback;
}

// The value `table` names `name`, else nullopt.
template <class Enum, std::size_t N>
constexpr std::optional<Enum> value_of(const EnumName<Enum> (&table)[N], std::string_view name) {
  for (const EnumName<Enum>& entry : table)
    if (entry.name == name) return entry.value;
  return std::nullopt;
}

}  // namespace attnsuite
