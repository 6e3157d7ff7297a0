// The machine's fp32 FMA peak, measured rather than looked up, for "% of peak" figures.
#pragma once

#include "core/isa.hpp"

namespace attnsuite::cpu {

// Runs independent chains of FMAs of `isa`'s width (256-bit AVX2, 512-bit AVX-512) on every
// hardware thread for about `seconds` (in five windows, keeping the best) and returns the
// achieved GFLOP/s summed over threads, counting 2 FLOPs per lane per FMA (16 per AVX2
// instruction, 32 per AVX-512 one). Each thread keeps 12 ymm or 24 zmm accumulators live, more
// than the latency × pipes (4 cycles × 2 FMA pipes = 8) needed to saturate two pipes.
// Datasheet check for Zen 4: 2 × 256-bit FMA pipes per core = 2 × 8 lanes × 2 FLOPs =
// 32 FLOP/cycle/core with either ISA (a 512-bit FMA takes both halves); a Xeon with two 512-bit
// FMA units doubles that with AVX-512. `isa` must be one cpu_supports().
double measure_fp32_fma_peak_gflops(CpuIsa isa, double seconds = 0.2);
// The same for widest_cpu_isa(): the machine's peak, which every backend is read against (peers
// such as ONNX Runtime use AVX-512 where it exists, whatever ATTNSUITE_CPU_ISA says of ours).
double measure_fp32_fma_peak_gflops(double seconds = 0.2);

// Host memory copy bandwidth in GB/s, counting bytes read plus bytes written (STREAM's Copy
// convention, as the rows' GB/s count Q, K, V read and O written): every hardware thread
// memcpy's its slice of a buffer of max(4 × last-level cache, 256 MiB), pages touched first;
// the best of `trials` copies.
double measure_host_copy_gbps(int trials = 5);

// The CPU backends' fixed cost in microseconds: the fastest of `trials` empty parallel_for
// calls over every hardware thread (threads started and joined), timed with the steady clock
// as the runner times a case. No CPU case can take less.
double measure_dispatch_us(int trials = 50);

}  // namespace attnsuite::cpu
