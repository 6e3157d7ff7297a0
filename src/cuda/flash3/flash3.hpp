#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

// `flash3`: the sm_90a (Hopper) kernel. Built and registered only with -DATTNSUITE_FLASH3=ON.
std::unique_ptr<Backend> make_flash3_backend();

// `flash3-fp8`: the e4m3 variant (bf16 in, per-tensor quantization pre-pass, bf16 out); same build option.
std::unique_ptr<Backend> make_flash3_fp8_backend();

// "<backend> needs sm_90 (Hopper); this GPU is sm_XY" unless the current device is sm_90.
Support supports_hopper(std::string_view backend);

// The consumer schedule of flash3 and flash3-fp8 as kernel configs (docs/kernels/flash3.md):
// "default" = v2 (intra-warpgroup overlap + ping-pong), "v1" = the serial first version. Chosen
// by force_kernel_config, else the kernel-config cache, else "default".
class Flash3Schedule {
 public:
  explicit Flash3Schedule(std::string backend) : backend_(std::move(backend)) {}
  std::vector<std::string> names() const { return {"default", "v1"}; }
  void force(std::string_view config);  // throws Error(Usage) for an unknown name
  // Picks the schedule for `problem`, remembers it (last()) and says whether it is v1's.
  bool choose_serial(const AttentionProblem& problem);
  const std::string& last() const { return last_; }

 private:
  std::string backend_, forced_, last_;
};

}  // namespace attnsuite::cuda
