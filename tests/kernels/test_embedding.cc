// embedding: rows of an f32 / f16 / bf16 table gathered and widened to f32. Widening is exact,
// so the result must equal the scalar converters of kernels/common/half.h bit for bit.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/cpu/embedding_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

TEST_CASE("embedding gathers and widens rows exactly", "[kernels][embedding]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  Runners runners;
  IsaRestore restore;
  const int64_t vocab = 301;
  for (int64_t dim : {1, 7, 64, 769, 5125}) {
    // The same values in all three formats; the expected f32 rows come from the scalar converters.
    std::vector<float> f32(size_t(vocab * dim));
    for (float& v : f32) v = dist(rng);
    f32[3] = 0.0f, f32[1 % f32.size()] = -1e-7f;  // a zero and an f16 subnormal
    std::vector<uint16_t> f16(f32.size()), bf16(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      f16[i] = f32_to_f16(f32[i]);
      bf16[i] = f32_to_bf16(f32[i]);
    }
    for (int64_t n_tokens : {1, 3, 17, 100}) {
      // First and last rows, repeats, and random ids.
      std::vector<int32_t> ids = {0, static_cast<int32_t>(vocab - 1), 5, 5};
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
      while (static_cast<int64_t>(ids.size()) < n_tokens) ids.push_back(pick(rng));
      ids.resize(size_t(n_tokens));
      const int64_t ldy = dim + 5;
      for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
        const void* table = type == DType::kF32   ? static_cast<const void*>(f32.data())
                            : type == DType::kF16 ? static_cast<const void*>(f16.data())
                                                  : static_cast<const void*>(bf16.data());
        for (Isa isa : supported_isas()) {
          REQUIRE(set_isa(isa));
          for (auto [name, runner] : runners.all()) {
            INFO("dim " << dim << " tokens " << n_tokens << " type " << static_cast<int>(type)
                        << " isa " << isa_name(isa) << " runner " << name);
            // Padding between rows is poisoned and must survive.
            std::vector<float> y(size_t((n_tokens - 1) * ldy + dim), 12345.0f);
            embedding(n_tokens, ids.data(), table, type, vocab, dim, y.data(), ldy, *runner);
            int64_t bad = 0, pad = 0;
            for (int64_t t = 0; t < n_tokens; ++t) {
              for (int64_t i = 0; i < dim; ++i) {
                const size_t k = size_t(ids[size_t(t)] * dim + i);
                const float want = type == DType::kF32   ? f32[k]
                                   : type == DType::kF16 ? f16_to_f32(f16[k])
                                                         : bf16_to_f32(bf16[k]);
                bad += to_bits(y[size_t(t * ldy + i)]) != to_bits(want);
              }
              for (int64_t i = dim; i < ldy && t + 1 < n_tokens; ++i) {
                pad += y[size_t(t * ldy + i)] != 12345.0f;
              }
            }
            CHECK(bad == 0);
            CHECK(pad == 0);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
