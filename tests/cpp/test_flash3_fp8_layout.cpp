// flash3-fp8's register/shared-memory index maps (src/cuda/hopper/fp8_layout.hpp), checked on
// the CPU: P·V computed through the kernel's maps — P packed from the fp32 accumulator into
// 8-bit A-fragment registers, V transposed into Vᵀ with permuted key columns — must pair every
// P[row][key] with V[key][d] of the same key, for every thread, register and byte. A mismatch
// here is a wrong O on the GPU with a right LSE.
#include <gtest/gtest.h>

#include <array>
#include <set>

#include "cuda/hopper/fp8_layout.hpp"

namespace attnsuite::cuda::hopper::fp8_layout {
namespace {

TEST(Flash3Fp8Layout, KeyPermutationIsABijection) {
  std::set<int> keys;
  for (int s = 0; s < 16; ++s) {
    ASSERT_GE(permuted_key(s), 0);
    ASSERT_LT(permuted_key(s), 16);
    keys.insert(permuted_key(s));
  }
  EXPECT_EQ(keys.size(), 16u);
  std::set<int> tile_keys;
  for (int s = 0; s < 128; ++s) tile_keys.insert(key_of_column(s));
  EXPECT_EQ(tile_keys.size(), 128u);
  EXPECT_EQ(*tile_keys.rbegin(), 127);
}

// Every byte of every A register of every lane holds the accumulator entry of the same row
// half whose key is the one that A column — and so Vᵀ column — stands for.
TEST(Flash3Fp8Layout, PackedPHoldsTheKeysItsColumnsStandFor) {
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j)  // k-steps of a 128-key tile
      for (int reg = 0; reg < 4; ++reg)
        for (int byte = 0; byte < 4; ++byte) {
          const int entry = 16 * j + p_entry(reg, byte);
          const int key_held = accumulator_column(entry, lane);
          const int column = 32 * j + a_fragment_column(reg, byte, lane);
          EXPECT_EQ(key_held, key_of_column(column))
              << "lane " << lane << " k-step " << j << " a[" << reg << "] byte " << byte;
          EXPECT_EQ(accumulator_row_half(entry), a_fragment_row_half(reg)) << "lane " << lane << " a[" << reg << "]";
        }
}

// Each thread packs 16 distinct entries per k-step: all of its accumulator block, once.
TEST(Flash3Fp8Layout, EveryAccumulatorEntryIsPackedOnce) {
  std::set<int> entries;
  for (int reg = 0; reg < 4; ++reg)
    for (int byte = 0; byte < 4; ++byte) entries.insert(p_entry(reg, byte));
  EXPECT_EQ(entries.size(), 16u);
  EXPECT_EQ(*entries.rbegin(), 15);
}

// The transposer writes, in Vᵀ column 4l + q, the key that column stands for; the 32 lanes
// cover the 128 columns once.
TEST(Flash3Fp8Layout, TransposedVColumnsFollowThePermutation) {
  std::array<int, 128> written{};
  for (int lane = 0; lane < 32; ++lane)
    for (int q = 0; q < 4; ++q) {
      EXPECT_EQ(transpose_key(lane, q), key_of_column(4 * lane + q)) << "lane " << lane << " byte " << q;
      ++written[4 * lane + q];
    }
  for (int column = 0; column < 128; ++column) EXPECT_EQ(written[column], 1) << column;
}

// The whole product for one warp's 16 rows: Σ over A columns of P[row][key(column)] ·
// V[key(column)] equals Σ over keys of P[row][key] · V[key] (distinct key weights make any
// mispairing visible).
TEST(Flash3Fp8Layout, PermutedProductEqualsThePlainOne) {
  auto p_value = [](int row, int key) { return (row + 1) * 1000 + key; };
  auto v_value = [](int key) { return key * key + 3; };
  for (int row_half = 0; row_half < 2; ++row_half)
    for (int quad_row = 0; quad_row < 8; ++quad_row) {
      long long plain = 0, permuted = 0;
      const int row = quad_row + 8 * row_half;
      for (int key = 0; key < 128; ++key) plain += static_cast<long long>(p_value(row, key)) * v_value(key);
      // What the tensor core sums: A[row][column] from the registers of lane 4·quad_row + c,
      // B[column] from Vᵀ column `column` (the key the transposer wrote there).
      for (int c = 0; c < 4; ++c) {
        const int lane = 4 * quad_row + c;
        for (int j = 0; j < 4; ++j)
          for (int reg = 0; reg < 4; ++reg) {
            if (a_fragment_row_half(reg) != row_half) continue;
            for (int byte = 0; byte < 4; ++byte) {
              const int a_value = p_value(row, accumulator_column(16 * j + p_entry(reg, byte), lane));
              const int column = 32 * j + a_fragment_column(reg, byte, lane);
              const int transposer_lane = column / 4, transposer_byte = column % 4;
              permuted += static_cast<long long>(a_value) * v_value(transpose_key(transposer_lane, transposer_byte));
            }
          }
      }
      EXPECT_EQ(permuted, plain) << "row " << row;
    }
}

}  // namespace
}  // namespace attnsuite::cuda::hopper::fp8_layout
