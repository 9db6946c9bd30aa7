// hadamard_rows (and the "hadamard" graph op) against an explicit Sylvester matrix in double.
#include <catch2/catch.hpp>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/graph.h"
#include "kernels/cpu/hadamard_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

// H_B built by the recursion H_2m = [[H_m, H_m], [H_m, -H_m]], entries ±1, row-major [B, B].
std::vector<int8_t> sylvester(int64_t b) {
  std::vector<int8_t> h{1};
  for (int64_t m = 1; m < b; m *= 2) {
    std::vector<int8_t> next(static_cast<size_t>(4 * m * m));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        const int8_t v = h[size_t(i * m + j)];
        next[size_t(i * 2 * m + j)] = v;
        next[size_t(i * 2 * m + m + j)] = v;
        next[size_t((i + m) * 2 * m + j)] = v;
        next[size_t((i + m) * 2 * m + m + j)] = static_cast<int8_t>(-v);
      }
    }
    h.swap(next);
  }
  return h;
}

// Each block of each row: y = H_B x / sqrt(B), in double. x: [rows, n] stride ldx.
std::vector<double> reference(int64_t rows, int64_t n, int64_t block, const float* x,
                              int64_t ldx) {
  const std::vector<int8_t> h = sylvester(block);
  const double s = 1.0 / std::sqrt(double(block));
  std::vector<double> y(size_t(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      for (int64_t i = 0; i < block; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < block; ++j) acc += h[size_t(i * block + j)] * double(x[r * ldx + b0 + j]);
        y[size_t(r * n + b0 + i)] = acc * s;
      }
    }
  }
  return y;
}

// In 2-norm each of the log2(B) f32 stages (an orthogonal map times sqrt(2)) adds at most about
// u·||x|| of error after normalisation, and the final scaling one more, so a block's error is
// below (log2(B) + 1)·u·||x|| with u = 2^-24. Twice that leaves room for the bound's looseness
// and is still far below any wrong sign or pairing, which is off by O(||x||).
double block_tol(int64_t block, double block_norm) {
  return 2.0 * (std::log2(double(block)) + 1.0) * 0x1p-24 * block_norm + 1e-30;
}

// Blocks (per row) whose error exceeds block_tol.
int64_t count_bad_blocks(int64_t rows, int64_t n, int64_t block, const std::vector<double>& want,
                         const float* x0, int64_t ldx0, const float* y, int64_t ldy) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      double err = 0, norm = 0;
      for (int64_t i = b0; i < b0 + block; ++i) {
        const double d = double(y[r * ldy + i]) - want[size_t(r * n + i)];
        err += d * d;
        norm += double(x0[r * ldx0 + i]) * x0[r * ldx0 + i];
      }
      if (!(std::sqrt(err) <= block_tol(block, std::sqrt(norm)))) {
        if (bad++ == 0) UNSCOPED_INFO("row " << r << " block at " << b0 << ": error " << std::sqrt(err));
      }
    }
  }
  return bad;
}

std::vector<float> random_vec(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Runs the kernel on a copy of x (stride ldx) on every ISA and runner and checks it against the
// Sylvester reference; the gaps between rows must come back untouched.
void check_case(std::mt19937& rng, int64_t rows, int64_t n, int64_t block, int64_t ldx) {
  std::vector<float> x = random_vec(rng, (rows - 1) * ldx + n);  // exact size: ASan sees overruns
  const std::vector<double> want = reference(rows, n, block, x.data(), ldx);
  Runners runners;
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    for (auto [name, runner] : runners.all()) {
      INFO("rows " << rows << " n " << n << " block " << block << " ldx " << ldx << " isa "
                   << isa_name(isa) << " runner " << name);
      std::vector<float> y = x;
      hadamard_rows(rows, n, block, y.data(), ldx, *runner);
      CHECK(count_bad_blocks(rows, n, block, want, x.data(), ldx, y.data(), ldx) == 0);
      int64_t gap_changed = 0;
      for (int64_t r = 0; r + 1 < rows; ++r) {
        for (int64_t i = n; i < ldx; ++i) gap_changed += y[size_t(r * ldx + i)] != x[size_t(r * ldx + i)];
      }
      CHECK(gap_changed == 0);
    }
  }
}

TEST_CASE("hadamard_block_for picks the largest power of two dividing n", "[kernels][hadamard]") {
  CHECK(hadamard_block_for(1) == 1);
  CHECK(hadamard_block_for(7) == 1);
  CHECK(hadamard_block_for(6) == 2);
  CHECK(hadamard_block_for(4096) == 4096);
  CHECK(hadamard_block_for(11008) == 256);   // 43 x 256
  CHECK(hadamard_block_for(14336) == 2048);  // 7 x 2048
  CHECK(hadamard_block_for(5632) == 512);    // 11 x 512
  CHECK(hadamard_block_for(688) == 16);      // 43 x 16
  CHECK(hadamard_block_for(1 << 20) == 1 << 14);  // the default cap
  CHECK(hadamard_block_for(4096, 128) == 128);
  CHECK(hadamard_block_for(96, 128) == 32);
}

TEST_CASE("hadamard_rows matches the Sylvester matrix for every block up to 4096",
          "[kernels][hadamard]") {
  std::mt19937 rng(11);
  for (int64_t block = 1; block <= 4096; block *= 2) {
    // One block, and several (block-diagonal); rows enough to split over the pool when small.
    for (int64_t blocks : {1, 3}) {
      const int64_t n = block * blocks;
      for (int64_t rows : block >= 1024 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 3, 17}) {
        check_case(rng, rows, n, block, n);
        check_case(rng, rows, n, block, n + 5);
      }
    }
  }
}

TEST_CASE("hadamard_rows on awkward widths and strides", "[kernels][hadamard]") {
  std::mt19937 rng(12);
  struct Case {
    int64_t rows, n, block;
  };
  const Case cases[] = {
      {17, 7, 1},      {3, 769, 1},     {2, 5125, 1},   {5, 6, 2},      {7, 12, 4},
      {33, 24, 8},     {3, 40, 8},      {9, 56, 8},     {4, 688, 16},   {3, 688, 8},
      {2, 5632, 512},  {2, 11008, 256}, {1, 14336, 2048}, {3, 4096, 16}, {2, 4096, 128},
      {5, 96, 32},   {2, 160, 32},
  };
  for (const Case& c : cases) {
    check_case(rng, c.rows, c.n, c.block, c.n);
    check_case(rng, c.rows, c.n, c.block, c.n + 3);  // odd stride: unaligned rows
  }
}

// Blocks above 4096 (an explicit matrix would be 2^28 entries): sampled outputs against the
// closed form of the Sylvester entries, H[i][j] = (-1)^popcount(i & j).
TEST_CASE("hadamard_rows matches sampled outputs for blocks of 8192 and 16384",
          "[kernels][hadamard]") {
  std::mt19937 rng(14);
  Runners runners;
  IsaRestore restore;
  for (int64_t block : {8192, 16384}) {
    const int64_t n = 2 * block;
    const std::vector<float> x = random_vec(rng, n);
    for (Isa isa : supported_isas()) {
      REQUIRE(set_isa(isa));
      INFO("block " << block << " isa " << isa_name(isa));
      std::vector<float> y = x;
      hadamard_rows(1, n, block, y.data(), n, runners.pool);
      std::uniform_int_distribution<int64_t> pick(0, n - 1);
      for (int k = 0; k < 64; ++k) {
        const int64_t i = pick(rng), b0 = i / block * block;
        double acc = 0, norm = 0;
        for (int64_t j = 0; j < block; ++j) {
          const double v = x[size_t(b0 + j)];
          acc += (std::popcount(uint64_t((i - b0) & j)) % 2 ? -v : v);
          norm += v * v;
        }
        acc /= std::sqrt(double(block));
        CHECK(std::fabs(y[size_t(i)] - acc) <= block_tol(block, std::sqrt(norm)));
      }
    }
  }
}

TEST_CASE("hadamard_rows is orthogonal, its own inverse and keeps norms", "[kernels][hadamard]") {
  std::mt19937 rng(13);
  Runners runners;
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    INFO("isa " << isa_name(isa));
    for (int64_t n : {64, 96, 384}) {
      const int64_t block = hadamard_block_for(n);
      // Rows of the identity come back as the rows of Hb (symmetric), so M·Mᵀ must be I.
      std::vector<float> m(size_t(n * n), 0.0f);
      for (int64_t i = 0; i < n; ++i) m[size_t(i * n + i)] = 1.0f;
      hadamard_rows(n, n, block, m.data(), n, runners.pool);
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < n; ++k) dot += double(m[size_t(i * n + k)]) * m[size_t(j * n + k)];
          worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
        }
      }
      // Entries are ±1/sqrt(B) rounded once (relative 6e-8); a dot of B of them is off by at
      // most ~2·B·6e-8/B, so 1e-6 is generous and a single wrong sign gives 2/B >= 2.6e-3.
      INFO("n " << n);
      CHECK(worst < 1e-6);
    }
    for (int64_t n : {16, 11008, 5632}) {
      const int64_t block = hadamard_block_for(n), rows = 5;
      const std::vector<float> x = random_vec(rng, rows * n);
      std::vector<float> y = x;
      hadamard_rows(rows, n, block, y.data(), n, runners.pool);
      // Norm preserved per block (the transform is orthogonal block by block).
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b0 = 0; b0 < n; b0 += block) {
          double nx = 0, ny = 0;
          for (int64_t i = b0; i < b0 + block; ++i) {
            nx += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
            ny += double(y[size_t(r * n + i)]) * y[size_t(r * n + i)];
          }
          CHECK(std::fabs(std::sqrt(ny) - std::sqrt(nx)) <= block_tol(block, std::sqrt(nx)));
        }
      }
      // Applying it twice gives x back: both errors add, hence the doubled tolerance.
      hadamard_rows(rows, n, block, y.data(), n, runners.pool);
      double worst = 0, norm = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        worst = std::max(worst, std::fabs(double(y[i]) - x[i]));
        norm = std::max(norm, std::fabs(double(x[i])));
      }
      INFO("n " << n);
      CHECK(worst <= 2.0 * block_tol(block, norm * std::sqrt(double(block))));
    }
  }
}

TEST_CASE("hadamard_rows with no rows or block 1 changes nothing", "[kernels][hadamard]") {
  SerialRunner serial;
  std::vector<float> x{1.0f, 2.0f, 3.0f};
  hadamard_rows(0, 3, 1, x.data(), 3, serial);
  hadamard_rows(1, 3, 1, x.data(), 3, serial);
  CHECK(x == std::vector<float>{1.0f, 2.0f, 3.0f});
}

}  // namespace
}  // namespace sampan::cpu

namespace sampan {
namespace {

using graph::Dim;
using graph::Executor;
using graph::Graph;
using graph::ValueId;

TEST_CASE("the hadamard op transforms a column slice and refuses a bad block", "[ops][hadamard]") {
  ThreadPool pool(2);
  // x [rows, 96]; split into [rows, 32] and [rows, 64]; the op reads the strided 64-wide slice.
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("rows"), Dim::fixed(96)});
  const auto parts = g.add_node("split", "split", {x}, {{"sizes", std::vector<int64_t>{32, 64}}}, 2);
  g.mark_output(g.add("hadamard", "had", {parts[1]}, {{"block", int64_t{16}}}));
  Executor ex(g, pool);
  std::mt19937 rng(5);
  for (int64_t rows : {1, 7}) {
    std::normal_distribution<float> d;
    std::vector<float> xv(size_t(rows * 96));
    for (float& v : xv) v = d(rng);
    const std::vector<Tensor> out = ex.run({{"x", Tensor::from_f32({rows, 96}, xv)}});
    REQUIRE(out[0].shape() == Shape{rows, 64});
    const std::vector<double> want =
        cpu::reference(rows, 64, 16, xv.data() + 32, 96);  // the slice starts at column 32
    CHECK(cpu::count_bad_blocks(rows, 64, 16, want, xv.data() + 32, 96, out[0].data<float>(),
                                out[0].stride(0)) == 0);
  }

  for (int64_t bad : {int64_t{0}, int64_t{12}, int64_t{128}}) {
    Graph gb;
    const ValueId xb = gb.add_input("x", DType::kF32, {Dim::sym("rows"), Dim::fixed(96)});
    gb.mark_output(gb.add("hadamard", "bad_had", {xb}, {{"block", bad}}));
    INFO("block " << bad);
    try {
      Executor exb(gb, pool);
      exb.run({{"x", Tensor::zeros({2, 96}, DType::kF32)}});
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      const std::string msg = e.what();
      CHECK(msg.find("bad_had") != std::string::npos);
      CHECK(msg.find(bad == 128 ? "does not divide" : "not a power of two") != std::string::npos);
    }
  }
  Graph gm;
  const ValueId xm = gm.add_input("x", DType::kF32, {Dim::fixed(2), Dim::fixed(8)});
  gm.mark_output(gm.add("hadamard", "no_block", {xm}));
  CHECK_THROWS_WITH(Executor(gm, pool).run({{"x", Tensor::zeros({2, 8}, DType::kF32)}}),
                    Catch::Contains("missing attribute 'block'"));
}

}  // namespace
}  // namespace sampan
