#include <catch2/catch.hpp>

#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "kernels/common/half.h"
#include "quant/fp8.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "smaps_test_util.h"

using namespace sampan;

TEST_CASE("tensor shapes, strides and views", "[core]") {
  Tensor t = Tensor::from_f32({2, 3}, {0, 1, 2, 3, 4, 5});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Shape{3, 1});
  CHECK(t.is_contiguous());
  CHECK(t.nbytes() == 24);
  Tensor col = t.slice(1, 1, 3);  // [2, 2] with row stride 3
  CHECK(col.shape() == Shape{2, 2});
  CHECK_FALSE(col.is_contiguous());
  CHECK(col.rows_contiguous());
  Tensor c = col.contiguous();
  CHECK(c.data<float>()[0] == 1);
  CHECK(c.data<float>()[1] == 2);
  CHECK(c.data<float>()[2] == 4);
  CHECK(c.data<float>()[3] == 5);
  CHECK(t.select(1).data<float>()[0] == 3);
  CHECK(t.reshape({3, -1}).shape() == Shape{3, 2});
  CHECK_THROWS_AS(t.reshape({4, 2}), Error);
  CHECK_THROWS_AS(t.slice(1, 2, 5), Error);
  CHECK_THROWS_AS(col.reshape({4}), Error);
  CHECK(t.str() == "f32[2, 3]");
}

TEST_CASE("packed i4 storage and conversion", "[core]") {
  Tensor t = Tensor::empty({2, 4}, DType::kI4);
  CHECK(t.nbytes() == 4);
  // Element 2i in the low nibble: values 1, -1, 7, -8 then 0, 2, -3, 5.
  const uint8_t bytes[4] = {0xF1, 0x87, 0x20, 0x5D};
  std::memcpy(t.raw(), bytes, 4);
  Tensor f = t.to_f32();
  const float want[8] = {1, -1, 7, -8, 0, 2, -3, 5};
  for (int i = 0; i < 8; ++i) CHECK(f.data<float>()[i] == want[i]);
}

TEST_CASE("fp8 e4m3 round trip matches the format definition", "[core]") {
  // Every finite code decodes to a value that encodes back to the same code.
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    const float v = quant::fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    const uint8_t back = quant::f32_to_fp8_e4m3(v);
    if (v == 0.0f) {
      CHECK((back & 0x7f) == 0);
    } else {
      CHECK(back == code);
    }
  }
  CHECK(quant::fp8_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(quant::fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(quant::f32_to_fp8_e4m3(1e6f) == 0x7e);   // saturates
  CHECK(quant::f32_to_fp8_e4m3(-1e6f) == 0xfe);
  // Halfway between 1.0 (0x38) and 1.125 (0x39) rounds to even (1.0).
  CHECK(quant::f32_to_fp8_e4m3(1.0625f) == 0x38);
  CHECK(quant::f32_to_fp8_e4m3(1.0626f) == 0x39);
}

TEST_CASE("bf16 conversion rounds to nearest even", "[core]") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(bf16_to_f32(0x4049) == Approx(3.140625f));
}

TEST_CASE("thread pool runs every task exactly once", "[core]") {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    CHECK(pool.concurrency() == threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (auto& h : hits) CHECK(h.load() == 1);
    }
  }
}

TEST_CASE("thread pool tolerates a nested run by running it serially", "[core]") {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.run(4, [&](int64_t) { pool.run(3, [&](int64_t) { total++; }); });
  CHECK(total.load() == 12);
}

TEST_CASE("cuda device requests fail cleanly without a GPU build or device", "[core]") {
  // With a GPU the same request succeeds; an index past the visible devices fails either way.
  if (cuda_device_count() > 0) {
    CHECK(Tensor::empty({4}, DType::kF32, Device::cuda(0)).device() == Device::cuda(0));
  } else {
    CHECK_THROWS_AS(Tensor::empty({4}, DType::kF32, Device::cuda(0)), Error);
  }
  CHECK_THROWS_AS(Tensor::empty({4}, DType::kF32, Device::cuda(cuda_device_count() + 7)), Error);
}

TEST_CASE("Tensor::to the CPU is a packed copy that never aliases", "[core]") {
  Tensor t = Tensor::from_f32({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor c = t.to(Device::cpu());
  CHECK(c.device() == Device::cpu());
  CHECK(c.shape() == t.shape());
  CHECK(c.raw() != t.raw());
  t.data<float>()[0] = 42;  // the copy does not see later writes
  CHECK(c.data<float>()[0] == 0);
  const Tensor col = t.slice(1, 1, 3).to(Device::cpu());  // strided source, packed result
  CHECK(col.is_contiguous());
  const float want[4] = {1, 2, 4, 5};
  for (int i = 0; i < 4; ++i) CHECK(col.data<float>()[i] == want[i]);
  CHECK(Tensor::empty({0, 5}, DType::kBF16).to(Device::cpu()).shape() == Shape{0, 5});
  if (!cuda_compiled() || cuda_device_count() == 0) {
    CHECK_THROWS_AS(t.to(Device::cuda(0)), Error);
  }
}

namespace {

// The kernel's THP mode ("always", "madvise" or "never"), empty where it has no THP.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
}

}  // namespace

TEST_CASE("large CPU buffers start on 2 MiB pages advised for THP, small ones stay 64-byte aligned",
          "[core]") {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  Tensor small = Tensor::empty({1000}, DType::kF32);
  CHECK(reinterpret_cast<uintptr_t>(small.raw()) % 64 == 0);
  // 5 MiB + 4 bytes: two whole huge pages and a tail that stays on 4 KiB pages.
  Tensor big = Tensor::empty({5 * (1 << 18) + 1}, DType::kF32);
  auto* p = static_cast<uint8_t*>(big.raw());
  REQUIRE(p != nullptr);
  const bool wanted = std::getenv("SAMPAN_HUGE_PAGES") == nullptr ||
                      std::string(std::getenv("SAMPAN_HUGE_PAGES")) != "0";
  if (wanted) CHECK(reinterpret_cast<uintptr_t>(p) % kHuge == 0);
  // Every byte is usable, the tail included.
  for (int64_t i = 0; i < big.nbytes(); i += 4096) p[i] = static_cast<uint8_t>(i >> 12);
  p[big.nbytes() - 1] = 0x5a;
  CHECK(p[big.nbytes() - 1] == 0x5a);
  CHECK(p[8192] == 2);
  const std::string mode = thp_mode();
  // 5.5 MiB: rounded up to three whole huge pages (an eighth or less added).
  Tensor fitted = Tensor::empty({11 * (1 << 17)}, DType::kF32);
  auto* q = static_cast<uint8_t*>(fitted.raw());
  for (int64_t i = 0; i < fitted.nbytes(); i += 4096) q[i] = 1;
  if (wanted && (mode == "always" || mode == "madvise")) {
    // Eligible for huge pages because it was advised (under "madvise" nothing else makes it so).
    CHECK(test::smaps_field(p, "THPeligible:") == 1);
    CHECK(test::smaps_field(q + (5 << 20), "THPeligible:") == 1);
  }
  if (wanted && mode == "madvise") {
    // The 4-byte tail past two whole pages is not worth a third: not advised.
    CHECK(test::smaps_field(p + (4 << 20) + 8, "THPeligible:") == 0);
  }
  INFO("THP mode: " << (mode.empty() ? "none" : mode));
}
