// `ring` loads NCCL at run time instead of linking it (src/cuda/ring/nccl_library.hpp): the
// loader binds every entry point ring calls from the NCCL of this machine, and says what it tried
// when a library is missing or is not NCCL. No GPU needed: loading NCCL initializes nothing.
#if ATTNSUITE_HAVE_CUDA && ATTNSUITE_HAVE_NCCL

#include <gtest/gtest.h>

#include <string>

#include "ring/cuda/nccl_library.hpp"

namespace attnsuite {
namespace {

TEST(NcclLoading, BindsEveryEntryPointOfThisMachinesNccl) {
#if !ATTNSUITE_TEST_NCCL_LIBRARY_FOUND
  GTEST_SKIP() << "CMake found nccl.h but no libnccl on this machine";
#endif
  std::string reason;
  const cuda::nccl::Api* api = cuda::nccl::load(&reason);
  ASSERT_NE(api, nullptr) << reason;
  EXPECT_GE(api->version, 21300) << api->path;
  EXPECT_NE(api->path.find("libnccl.so"), std::string::npos) << api->path;
  for (const void* entry :
       {reinterpret_cast<const void*>(api->comm_init_all), reinterpret_cast<const void*>(api->comm_destroy),
        reinterpret_cast<const void*>(api->comm_abort), reinterpret_cast<const void*>(api->send),
        reinterpret_cast<const void*>(api->recv), reinterpret_cast<const void*>(api->group_start),
        reinterpret_cast<const void*>(api->group_end), reinterpret_cast<const void*>(api->last_error)})
    EXPECT_NE(entry, nullptr);
  ASSERT_NE(api->error_string, nullptr);
  EXPECT_EQ(std::string(api->error_string(ncclSuccess)), "no error");
  EXPECT_EQ(std::string(api->error_string(ncclInvalidArgument)).rfind("invalid argument", 0), 0u);
  // Loaded once per process: the second call is the same library.
  EXPECT_EQ(cuda::nccl::load(nullptr), api);
}

TEST(NcclLoading, SaysWhatWasTriedWhenTheLibraryIsMissingOrNotNccl) {
  cuda::nccl::Api api;
  std::string reason;
  EXPECT_FALSE(cuda::nccl::try_load("/nonexistent/libnccl.so.2", &api, &reason));
  EXPECT_NE(reason.find("/nonexistent/libnccl.so.2"), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
  // A library that loads but is not NCCL: the first missing entry point and what ring needs.
  EXPECT_FALSE(cuda::nccl::try_load("libm.so.6", &api, &reason));
  EXPECT_NE(reason.find("has no ncclGetVersion (ring needs NCCL 2.13 or later)"), std::string::npos) << reason;
  EXPECT_EQ(api.comm_init_all, nullptr);
}

}  // namespace
}  // namespace attnsuite

#endif  // ATTNSUITE_HAVE_CUDA && ATTNSUITE_HAVE_NCCL
