// A const range over a table, for `for`: std::span<const T>'s job, which the C++17 device
// translation units cannot take from the headers that return one (flash2's configs.hpp, flash3's
// launch.hpp).
#pragma once

#include <cstddef>

namespace attnsuite::cuda {

template <class T>
struct PointerRange {
  const T* first;
  std::size_t count;
  const T* begin() const { return first; }
  const T* end() const { return first + count; }
};

}  // namespace attnsuite::cuda
