// Umbrella header of the public C++ API.
#pragma once

#include "attnsuite/backend.hpp"
#include "attnsuite/dtype.hpp"
#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "attnsuite/memory.hpp"
#include "attnsuite/problem.hpp"
#include "attnsuite/registry.hpp"
#include "attnsuite/tensor.hpp"
