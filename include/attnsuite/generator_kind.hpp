// The input generators that also run on a device (DeviceContext::generate fills a tensor in place
// with them). Their element functions are src/core/generator_math.hpp. Plain C++17: device code
// includes it.
#pragma once

namespace attnsuite::bench::genmath {

// The generators that have a device implementation; values are stored in GeneratorInfo.
enum class Kind : int { Randn = 0, Uniform = 1 };

}  // namespace attnsuite::bench::genmath
