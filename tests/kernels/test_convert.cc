// convert_cpu: the vector conversions must be bit-exact with the scalar converters of
// kernels/common/half.h (round to nearest even, NaN kept) on every instruction set the CPU has.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/cpu/convert_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

// Bit patterns that stress rounding: random words, every class (zeros, subnormals, inf, quiet
// and signalling NaN with payloads), exact ties and near-ties for both 16-bit formats, the f16
// overflow and underflow boundaries, and values spread over the f16 range.
std::vector<float> tricky_floats() {
  std::mt19937 rng(1234);
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000,  // zeros, infinities
      0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001,  // quiet / signalling NaN
      0x7fbfffff, 0x7fc12345, 0x7f812345, 0xffffffff,  // NaN payloads
      0x00000001, 0x807fffff, 0x00400000, 0x00008000,  // f32 subnormals
      0x00018000, 0x00007fff, 0x0000ffff, 0x7f7fffff,  // bf16 ties among subnormals, max
      0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f807fff,  // bf16 ties (even/odd) and near ties
      0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff,  // f16: 65504, below/at the inf tie
      0x33000000, 0x33000001, 0x337fffff, 0x33c00000,  // f16: half of the smallest subnormal
      0x38800000, 0x387fffff, 0x387fe000, 0x38801000,  // f16: smallest normal boundary
      0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001,  // f16 ties (even/odd) and near ties
  };
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 400000; ++i) bits.push_back(any(rng));
  // Within the f16 range: exponents 2^-26 .. 2^16, random mantissas, some with exact ties.
  std::uniform_int_distribution<uint32_t> exp(127 - 26, 127 + 16);
  std::uniform_int_distribution<uint32_t> man(0, 0x7fffff);
  for (int i = 0; i < 200000; ++i) {
    uint32_t m = man(rng);
    if (i % 4 == 0) m = (m & ~0x1fffu) | 0x1000u;  // exactly halfway between two f16
    if (i % 4 == 1) m = (m & ~0xffffu) | 0x8000u;  // exactly halfway between two bf16
    bits.push_back((static_cast<uint32_t>(i & 1) << 31) | (exp(rng) << 23) | m);
  }
  std::vector<float> out;
  out.reserve(bits.size());
  for (uint32_t b : bits) out.push_back(from_bits(b));
  return out;
}

TEST_CASE("f32 to bf16 and f16 are bit-exact with the scalar converters", "[kernels][convert]") {
  const std::vector<float> src = tricky_floats();
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    INFO("isa " << isa_name(isa));
    // Whole array, then short unaligned slices so that every tail length is covered.
    std::vector<std::pair<int64_t, int64_t>> slices = {{0, static_cast<int64_t>(src.size())}};
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 769}) slices.push_back({3, n});
    for (auto [offset, n] : slices) {
      INFO("offset " << offset << " n " << n);
      std::vector<uint16_t> bf(static_cast<size_t>(n)), f16(static_cast<size_t>(n));
      convert_f32_to_bf16(src.data() + offset, bf.data(), n);
      convert_f32_to_f16(src.data() + offset, f16.data(), n);
      int64_t bad_bf = 0, bad_f16 = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float x = src[static_cast<size_t>(offset + i)];
        if (bf[static_cast<size_t>(i)] != f32_to_bf16(x)) {
          if (bad_bf++ == 0) {
            UNSCOPED_INFO("bf16 of 0x" << std::hex << to_bits(x) << ": 0x"
                                       << bf[static_cast<size_t>(i)] << " want 0x" << f32_to_bf16(x)
                                       << std::dec);
          }
        }
        if (f16[static_cast<size_t>(i)] != f32_to_f16(x)) {
          if (bad_f16++ == 0) {
            UNSCOPED_INFO("f16 of 0x" << std::hex << to_bits(x) << ": 0x"
                                      << f16[static_cast<size_t>(i)] << " want 0x" << f32_to_f16(x)
                                      << std::dec);
          }
        }
      }
      CHECK(bad_bf == 0);
      CHECK(bad_f16 == 0);
    }
  }
}

TEST_CASE("bf16 and f16 to f32 match the scalar converters for all 65536 patterns",
          "[kernels][convert]") {
  // Every pattern, then again from an odd offset so the vector tails see each class too.
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    INFO("isa " << isa_name(isa));
    for (auto [offset, n] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 65536}, {1, 65536}, {5, 1}, {7, 7}, {9, 17}, {11, 33}}) {
      INFO("offset " << offset << " n " << n);
      const uint16_t* src = all.data() + offset;
      std::vector<float> bf(static_cast<size_t>(n)), f16(static_cast<size_t>(n));
      convert_to_f32(DType::kBF16, src, bf.data(), n);
      convert_to_f32(DType::kF16, src, f16.data(), n);
      int64_t bad_bf = 0, bad_f16 = 0;
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        // bf16 -> f32 is a 16-bit shift, exact for every pattern including NaN payloads.
        bad_bf += to_bits(bf[k]) != to_bits(bf16_to_f32(src[i]));
        // f16 -> f32 is exact for every number and infinity. NaN: the hardware quietens
        // signalling NaNs (sets the top mantissa bit), so only NaN-ness and sign must agree.
        const float want = f16_to_f32(src[i]);
        if (std::isnan(want)) {
          bad_f16 += !std::isnan(f16[k]) || std::signbit(f16[k]) != std::signbit(want);
        } else {
          bad_f16 += to_bits(f16[k]) != to_bits(want);
        }
      }
      CHECK(bad_bf == 0);
      CHECK(bad_f16 == 0);
    }
  }
}

TEST_CASE("f32 to f32 is a copy", "[kernels][convert]") {
  std::vector<float> src = {1.5f, -0.0f, from_bits(0x7fa00001), from_bits(0x00000003), 3e38f};
  std::vector<float> dst(src.size(), 7.0f);
  convert_to_f32(DType::kF32, src.data(), dst.data(), static_cast<int64_t>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) CHECK(to_bits(dst[i]) == to_bits(src[i]));
}

}  // namespace
}  // namespace sampan::cpu
