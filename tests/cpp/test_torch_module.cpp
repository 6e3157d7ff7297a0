// The torch peers live in libattnsuite_torch.so, loaded on their first lookup
// (src/peers/torch/torch_sdpa.hpp). Where it cannot be loaded they stay listed and refuse, with
// the loader's message; the program itself starts and runs everything else.
#if ATTNSUITE_HAVE_TORCH_PEERS

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "cli_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

TEST(TorchModule, WhereItCannotBeLoadedTheTorchPeersRefuseSayingWhy) {
  // Wide enough that no cell wraps; without a GPU `list`'s "here" column says that first, and the
  // loader's message is in the "supports" column either way.
  const CliResult r = run_cli({"list"}, {"ATTNSUITE_TORCH_MODULE=/nonexistent/libattnsuite_torch.so", "COLUMNS=1000"});
  ASSERT_EQ(r.code, 0) << r.err;
  int refusing = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" torch-") == std::string::npos) continue;
    EXPECT_NE(line.find("none here: the PyTorch peers' module could not be loaded: libattnsuite_torch.so not found "
                        "(looked for /nonexistent/libattnsuite_torch.so)"),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("PyTorch SDPA peer (not loaded)"), std::string::npos) << line;
    ++refusing;
  }
  EXPECT_EQ(refusing, 5) << r.out;
  // The rest of the list is there.
  EXPECT_NE(r.out.find(" cpu-flash "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace attnsuite

#endif  // ATTNSUITE_HAVE_TORCH_PEERS
