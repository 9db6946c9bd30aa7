// dequantize_ggml_row against the `gguf` Python package (llama.cpp's reference), bit for bit:
// tests/data/ggml/<TYPE>.blocks.npy holds random rows of blocks (finite f16 scales, some
// subnormal or -0) and <TYPE>.f32.npy their dequantization by gguf.quants.dequantize
// (tests/reference/make_ggml_goldens.py writes both). Each row is also decoded from an odd
// address and in sub-rows (k = one block, two blocks), and the no-op preconditions are checked.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/npy.h"
#include "kernels/common/ggml_type.h"
#include "kernels/cpu/ggml_dequant.h"

namespace sampan::cpu {
namespace {

struct Golden {
  GgmlType type;
  const char* name;
};

const Golden kGoldens[] = {
    {GgmlType::kQ4_0, "Q4_0"}, {GgmlType::kQ4_1, "Q4_1"},     {GgmlType::kQ5_0, "Q5_0"},
    {GgmlType::kQ5_1, "Q5_1"}, {GgmlType::kQ8_0, "Q8_0"},     {GgmlType::kQ2_K, "Q2_K"},
    {GgmlType::kQ3_K, "Q3_K"}, {GgmlType::kQ4_K, "Q4_K"},     {GgmlType::kQ5_K, "Q5_K"},
    {GgmlType::kQ6_K, "Q6_K"}, {GgmlType::kIQ4_NL, "IQ4_NL"}, {GgmlType::kIQ4_XS, "IQ4_XS"},
    {GgmlType::kMXFP4, "MXFP4"}, {GgmlType::kTQ2_0, "TQ2_0"}, {GgmlType::kTQ1_0, "TQ1_0"},
};

std::string golden_path(const std::string& file) {
  return std::string(SAMPAN_SOURCE_DIR) + "/tests/data/ggml/" + file;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST_CASE("dequantize_ggml_row matches gguf's dequantize bit for bit", "[kernels][ggml]") {
  for (const Golden& g : kGoldens) {
    INFO("type " << g.name);
    REQUIRE(ggml_block_type_supported(g.type));
    const Tensor blocks = read_npy(golden_path(std::string(g.name) + ".blocks.npy"));
    const Tensor want = read_npy(golden_path(std::string(g.name) + ".f32.npy"));
    REQUIRE(blocks.dtype() == DType::kU8);
    REQUIRE(want.dtype() == DType::kF32);
    REQUIRE(blocks.rank() == 2);
    REQUIRE(want.rank() == 2);
    const int64_t rows = want.dim(0), k = want.dim(1);
    REQUIRE(blocks.dim(0) == rows);
    REQUIRE(blocks.dim(1) == ggml_row_bytes(g.type, k));
    const int64_t row_bytes = blocks.dim(1), bs = ggml_block_size(g.type);
    const uint8_t* src = blocks.data<uint8_t>();
    const float* ref = want.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      // An odd address, exactly the row's size: any over-read shows under ASan.
      std::vector<uint8_t> buf(row_bytes + 1);
      std::memcpy(buf.data() + 1, src + r * row_bytes, row_bytes);
      std::vector<float> got(k + 1, -7.0f);
      dequantize_ggml_row(g.type, buf.data() + 1, got.data(), k);
      int64_t mismatches = 0, first = -1;
      for (int64_t c = 0; c < k; ++c) {
        if (bits(got[c]) != bits(ref[r * k + c])) {
          if (first < 0) first = c;
          ++mismatches;
        }
      }
      INFO("row " << r << " first mismatch at " << first << " got "
                  << (first >= 0 ? got[first] : 0.0f) << " want "
                  << (first >= 0 ? ref[r * k + first] : 0.0f));
      CHECK(mismatches == 0);
      CHECK(got[k] == -7.0f);
      // Sub-rows: the first one and two blocks decode the same as within the long row.
      for (int64_t nb : {1, 2}) {
        std::vector<float> part(nb * bs);
        dequantize_ggml_row(g.type, buf.data() + 1, part.data(), nb * bs);
        CHECK(std::memcmp(part.data(), got.data(), part.size() * 4) == 0);
      }
    }
  }
}

TEST_CASE("dequantize_ggml_row: preconditions violated write nothing out of bounds",
          "[kernels][ggml]") {
  std::vector<uint8_t> src(256 * 4, 0x11);
  std::vector<float> dst(300, -7.0f);
  // Unsupported and plain types: nothing written.
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_K, GgmlType::kIQ2_XXS}) {
    CHECK_FALSE(ggml_block_type_supported(t));
    dequantize_ggml_row(t, src.data(), dst.data(), 256);
    CHECK(dst[0] == -7.0f);
  }
  // Negative and zero k: nothing written.
  dequantize_ggml_row(GgmlType::kQ4_0, src.data(), dst.data(), -32);
  dequantize_ggml_row(GgmlType::kQ4_0, src.data(), dst.data(), 0);
  CHECK(dst[0] == -7.0f);
  // A partial trailing block is left unwritten.
  dequantize_ggml_row(GgmlType::kQ8_0, src.data(), dst.data(), 40);
  CHECK(dst[31] != -7.0f);
  CHECK(dst[32] == -7.0f);
  CHECK(dst[39] == -7.0f);
}

}  // namespace
}  // namespace sampan::cpu
