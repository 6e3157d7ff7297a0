#include "core/peak.hpp"

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "attnsuite/error.hpp"
#include "core/host_info.hpp"
#include "core/parallel.hpp"
#include "core/simd_target.hpp"

namespace attnsuite::cpu {
namespace {

// 12 chains + 2 constants fit the 16 ymm registers (16 chains would spill to the stack) and
// exceed the 8 in flight that 4-cycle latency × 2 pipes needs.
constexpr int kChains = 12;
// 24 + 2 of the 32 zmm registers.
constexpr int kChainsAvx512 = 24;
constexpr long kFmasPerRound = 1L << 16;  // per chain between clock reads

// Returns FMA instructions issued; writes a value derived from every chain so none is dead.
long fma_loop_avx2(double seconds, volatile float* sink) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 1e-3f * c);
  // |multiplier| < 1 and a small addend keep the chains finite forever.
  const __m256 multiplier = _mm256_set1_ps(0.999999f);
  const __m256 addend = _mm256_set1_ps(1e-7f);
  long rounds = 0;
  const auto start = std::chrono::steady_clock::now();
  do {
    for (long step = 0; step < kFmasPerRound; ++step) {
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], multiplier, addend);
    }
    ++rounds;
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  *sink = _mm256_cvtss_f32(total);
  return rounds * kFmasPerRound * kChains;
}

// fma_loop_avx2 at 512 bits.
ATTNSUITE_TARGET_AVX512 long fma_loop_avx512(double seconds, volatile float* sink) {
  __m512 acc[kChainsAvx512];
  for (int c = 0; c < kChainsAvx512; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * c);
  const __m512 multiplier = _mm512_set1_ps(0.999999f);
  const __m512 addend = _mm512_set1_ps(1e-7f);
  long rounds = 0;
  const auto start = std::chrono::steady_clock::now();
  do {
    for (long step = 0; step < kFmasPerRound; ++step) {
      ATTNSUITE_UNROLL  // rolled, the 24 chains lived in memory: 60% of AVX2's peak
          for (int c = 0; c < kChainsAvx512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], multiplier, addend);
    }
    ++rounds;
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  __m512 total = acc[0];
  for (int c = 1; c < kChainsAvx512; ++c) total = _mm512_add_ps(total, acc[c]);
  *sink = _mm512_cvtss_f32(total);
  return rounds * kFmasPerRound * kChainsAvx512;
}

}  // namespace

namespace {
double measure_once(CpuIsa isa, double seconds) {
  const int threads = cpu_threads();
  std::vector<double> gflops(threads, 0.0);
  std::vector<float> sinks(threads, 0.0f);  // written through volatile: the chains stay live
  std::atomic<int> ready{0};
  auto worker = [&](int index) {
    ready.fetch_add(1);
    while (ready.load() < threads) {
    }  // start together so every core is busy during every thread's window
    const auto start = std::chrono::steady_clock::now();
    const bool wide = isa == CpuIsa::Avx512;
    const long fmas = wide ? fma_loop_avx512(seconds, &sinks[index]) : fma_loop_avx2(seconds, &sinks[index]);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double flops_per_fma = wide ? 32.0 : 16.0;  // lanes × 2
    gflops[index] = static_cast<double>(fmas) * flops_per_fma / elapsed * 1e-9;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& thread : pool) thread.join();
  double total = 0.0;
  for (double value : gflops) total += value;
  return total;
}
}  // namespace

// The best of five short windows: a peak is a maximum, and on a shared VM a single window
// that another tenant interrupts reads low (seen here: 117 against 219 GFLOP/s).
double measure_fp32_fma_peak_gflops(CpuIsa isa, double seconds) {
  ATTNSUITE_CHECK(cpu_supports(isa), ErrorKind::Unsupported,
                  fmt::format("fp32 peak: this CPU has no {}", to_string(isa)));
  double best = 0.0;
  for (int trial = 0; trial < 5; ++trial) best = std::max(best, measure_once(isa, seconds / 5));
  return best;
}

double measure_fp32_fma_peak_gflops(double seconds) { return measure_fp32_fma_peak_gflops(widest_cpu_isa(), seconds); }

double measure_host_copy_gbps(int trials) {
  const std::size_t bytes = std::max<std::size_t>(4 * host_info().llc_bytes, std::size_t{256} << 20);
  // Untracked on purpose: the harness's buffers, not a backend's.
  std::vector<unsigned char> source(bytes, 1), target(bytes, 0);
  const int threads = cpu_threads();
  const std::size_t slice = (bytes / threads + 63) / 64 * 64;
  auto copy_all = [&] {
    parallel_for(threads, threads, [&](std::int64_t item, int) {
      const std::size_t begin = static_cast<std::size_t>(item) * slice;
      if (begin < bytes) std::memcpy(target.data() + begin, source.data() + begin, std::min(slice, bytes - begin));
    });
  };
  copy_all();  // first touch of every page outside the timed copies
  double best = 0.0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    copy_all();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds * 1e-9);
  }
  return best;
}

double measure_dispatch_us(int trials) {
  const int threads = cpu_threads();
  double best = 0.0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    parallel_for(threads, threads, [](std::int64_t, int) {});
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    best = trial == 0 ? us : std::min(best, us);
  }
  return best;
}

}  // namespace attnsuite::cpu
