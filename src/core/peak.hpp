// The machine's fp32 FMA peak, measured rather than looked up, for "% of peak" figures.
#pragma once

namespace attnsuite::cpu {

// Runs independent chains of 256-bit FMAs (AVX2) on every hardware thread for about
// `seconds` (in five windows, keeping the best) and returns the achieved GFLOP/s summed over threads, counting 2 FLOPs per lane
// per FMA (16 per instruction). Each thread keeps 12 accumulators live, more than the
// latency × pipes (4 cycles × 2 FMA pipes = 8 on Zen 4) needed to saturate both pipes.
// Datasheet check for Zen 4: 2 × 256-bit FMA pipes per core = 2 × 8 lanes × 2 FLOPs =
// 32 FLOP/cycle/core; a measurement close to 32 × cores × clock says the pipes are full.
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
