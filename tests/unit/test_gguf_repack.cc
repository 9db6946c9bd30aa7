// quant/gguf_repack.h: GGUF Q4_0 rows mapped onto Sampan's INT4 layout dequantize to the same
// f32 values as the Q4_0 rows, checked against Q4_0 decoded here from its published layout and
// against the GGUF dequantizer (itself checked against the gguf package, test_ggml_dequant).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/ggml_type.h"
#include "kernels/common/half.h"
#include "kernels/cpu/ggml_dequant.h"
#include "quant/gguf_repack.h"

namespace {

using sampan::f16_to_f32;
using sampan::GgmlType;

// Bit-identical f32 (NaN payloads aside: any NaN equals any NaN).
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

TEST_CASE("GGUF Q4_0 -> INT4 g32: every weight dequantizes to the same f32",
          "[quant][gguf_repack]") {
  std::mt19937 rng(1804);
  for (int64_t k : {32, 64, 96, 2048}) {
    const int64_t rows = 7, nb = k / 32;
    std::vector<uint8_t> src(rows * nb * 18);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    // Scales: random f16 bits (subnormals, negatives, infinities and NaNs among them), and
    // some ordinary ones.
    for (int64_t b = 0; b < rows * nb; ++b) {
      if (b % 3 == 0) {
        const uint16_t h = sampan::f32_to_f16(0.01f * static_cast<float>(b % 17) - 0.05f);
        std::memcpy(src.data() + b * 18, &h, 2);
      }
    }
    std::vector<uint8_t> data(rows * k / 2);
    std::vector<uint16_t> scales(rows * nb);
    sampan::quant::q4_0_to_int4(src.data(), rows, k, data.data(), scales.data());
    std::vector<float> ggml(k);
    for (int64_t r = 0; r < rows; ++r) {
      sampan::cpu::dequantize_ggml_row(GgmlType::kQ4_0, src.data() + r * nb * 18, ggml.data(), k);
      for (int64_t e = 0; e < k; ++e) {
        // INT4 (kernels/common/dtype.h): element 2j in the low nibble of byte j, two's
        // complement; scale per 32 elements as f16.
        const uint8_t byte = data[r * k / 2 + e / 2];
        const int nib = e % 2 ? byte >> 4 : byte & 15;
        const int q = nib >= 8 ? nib - 16 : nib;
        const float s = f16_to_f32(scales[r * nb + e / 32]);
        const float int4 = s * static_cast<float>(q);
        // Q4_0 (GGUF): block of 32, f16 d, byte l: element l low nibble, element l + 16 high.
        const uint8_t* blk = src.data() + (r * nb + e / 32) * 18;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const int l = static_cast<int>(e % 32);
        const int n = l < 16 ? blk[2 + l] & 15 : blk[2 + l - 16] >> 4;
        const float q4_0 = f16_to_f32(dh) * static_cast<float>(n - 8);
        INFO("k=" << k << " row " << r << " element " << e);
        CHECK(same(int4, q4_0));
        CHECK(same(int4, ggml[e]));
      }
    }
  }
}

}  // namespace
