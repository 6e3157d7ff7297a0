// The index maps that connect the 8-bit P registers of the Hopper kernels to their transposed V
// (flash3-fp8, whose producer transposes V; sage2, whose quantizer writes Vᵀ so):
// plain constexpr functions, used by the kernels and checked on the CPU against the PTX ISA's
// fragment layouts (tests/cpp/test_flash3_fp8_layout.cpp). No CUDA headers.
//
// For S columns 32j..32j+31 (k-step j of P·V), the accumulator gives thread t (c = t % 4) the keys
// 32j + 8i + 2c + e (i < 4, e < 2) of its two rows, while the 8-bit A fragment wants columns
// 32j + 4c + v and 32j + 16 + 4c + v (v < 4) in a[0..3]. Instead of shuffling P between lanes,
// A column 16g + 4c + v holds key 16g + π(4c + v) with
//   π(s) = 2·(s / 4) + (s % 2) + 8·((s / 2) % 2)      (s < 16; a bijection),
// i.e. thread c packs keys 2c, 2c+1, 2c+8, 2c+9 of each 16-key half into one register, and Vᵀ
// column 16g + s holds key 16g + π(s): Σ_s P[π(s)]·V[π(s)] is the same sum.
#pragma once

namespace attnsuite::cuda::hopper::fp8_layout {

// The wgmma fp32 accumulator (m64nN): thread t's entry 4i + 2h + e is row
// 16·(t / 32) + (t % 32) / 4 + 8h, column 8i + 2·(t % 4) + e.
constexpr int accumulator_column(int entry, int lane) { return 8 * (entry / 4) + 2 * (lane % 4) + entry % 2; }
constexpr int accumulator_row_half(int entry) { return (entry / 2) % 2; }

// The 8-bit A fragment of wgmma m64nNk32 from registers: register r, byte v (lowest first) of
// thread t is row 16·(t / 32) + (t % 32) / 4 + 8·(r % 2), column 4·(t % 4) + 16·(r / 2) + v.
constexpr int a_fragment_column(int reg, int byte, int lane) { return 4 * (lane % 4) + 16 * (reg / 2) + byte; }
constexpr int a_fragment_row_half(int reg) { return reg % 2; }

// π: the key (within a 16-key group) that A column s (< 16) of the group carries, so that every
// thread packs only its own accumulator entries: thread c holds keys 2c, 2c+1, 2c+8, 2c+9.
constexpr int permuted_key(int s) { return 2 * (s / 4) + s % 2 + 8 * ((s / 2) % 2); }
// The key of a tile that column s of P (A operand, k-step s / 32) and of Vᵀ stand for.
constexpr int key_of_column(int s) { return (s / 16) * 16 + permuted_key(s % 16); }

// Which entry of a 16-entry accumulator block (keys 32j .. 32j+31 of k-step j) goes into byte
// `byte` of A register `reg`: a[0] = row g keys 2c, 2c+1, 2c+8, 2c+9; a[1] the same of row
// g+8; a[2], a[3] those keys + 16.
constexpr int p_entry(int reg, int byte) { return 8 * (reg / 2) + 2 * (reg % 2) + 4 * (byte / 2) + byte % 2; }

// The transposer: lane l writes Vᵀ columns 4l .. 4l+3 of a 128-key tile; byte q of its word
// comes from tile key transpose_key(l, q).
constexpr int transpose_key(int lane, int q) { return 16 * (lane / 4) + 2 * (lane % 4) + (q & 1) + 8 * (q >> 1); }

}  // namespace attnsuite::cuda::hopper::fp8_layout
