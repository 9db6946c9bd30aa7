// The Winograd conv's driver and weight transform (conv_winograd_cpu.h): cuts the tiles into
// groups and the output blocks into chunks, one task each, and runs conv_winograd_avx512.cc's
// stages with per-thread scratch.
#include "kernels/cpu/conv_winograd_cpu.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/conv_winograd_detail.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// G of F(4x4, 3x3) (points 0, 1, -1, 2, -2, inf).
constexpr double kG[6][3] = {{1.0 / 4, 0, 0},
                             {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                             {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                             {1.0 / 24, 1.0 / 12, 1.0 / 6},
                             {1.0 / 24, -1.0 / 12, 1.0 / 6},
                             {0, 0, 1}};

// The stages for `block` on this CPU; block 0 where none runs.
winograd_detail::Stages pick_stages(int64_t block) {
  if (block == 16 && has_avx512()) return winograd_detail::stages_avx512();
  if (block == 8 && cpu_features().avx2 && cpu_features().fma) {
    return winograd_detail::stages_avx2();
  }
  return {};
}

}  // namespace

bool winograd_available(int64_t block) { return pick_stages(block).block != 0; }

int64_t winograd_weight_floats(int64_t o, int64_t c, int64_t block) {
  return ceil_div(o, block) * kWinogradPoints * ceil_div(c, block) * block * block;
}

void winograd_transform_weights(int64_t o, int64_t c, int64_t block, const float* w, float* u) {
  const int64_t cb = ceil_div(c, block);
  const int64_t bb = block * block;
  std::fill(u, u + winograd_weight_floats(o, c, block), 0.0f);
  for (int64_t oc = 0; oc < o; ++oc) {
    for (int64_t ic = 0; ic < c; ++ic) {
      const float* g = w + (oc * c + ic) * 9;
      double gg[6][3];  // G g
      for (int i = 0; i < 6; ++i) {
        for (int k = 0; k < 3; ++k) {
          gg[i][k] = kG[i][0] * g[k] + kG[i][1] * g[3 + k] + kG[i][2] * g[6 + k];
        }
      }
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 6; ++j) {
          const double val = gg[i][0] * kG[j][0] + gg[i][1] * kG[j][1] + gg[i][2] * kG[j][2];
          const int64_t at = ((oc / block * kWinogradPoints + i * 6 + j) * cb + ic / block) * bb +
                             ic % block * block + oc % block;
          u[at] = static_cast<float>(val);
        }
      }
    }
  }
}

void conv2d_winograd(const WinogradConvShape& s, const float* x, const float* u,
                     const float* bias, const float* residual, const ConvEpilogue& ep, float* y,
                     TaskRunner& runner) {
  const winograd_detail::Stages st = pick_stages(s.block);
  const int64_t ho = s.out_h(), wo = s.out_w();
  if (st.block == 0 || s.n <= 0 || s.out_blocks <= 0 || ho <= 0 || wo <= 0) return;
  const int64_t tiles = s.n * ceil_div(ho, 4) * ceil_div(wo, 4);
  // Groups of up to 14 tiles, evened out so the last group is not a sliver.
  const int64_t n_groups = ceil_div(tiles, st.group_tiles);
  const int64_t per_group = ceil_div(tiles, n_groups);
  // Too few tile groups for the workers (late layers at batch 1): split the output blocks
  // too, each chunk re-transforming its group's input (a few % of its GEMM work).
  const int64_t want = 4 * static_cast<int64_t>(runner.concurrency());
  const int64_t pairs = ceil_div(s.out_blocks, 2);
  const int64_t n_chunks =
      n_groups >= want ? 1 : std::min(pairs, ceil_div(want, n_groups));
  const int64_t per_chunk = ceil_div(pairs, n_chunks) * 2;
  const int64_t chunks = ceil_div(s.out_blocks, per_chunk);
  runner.run(n_groups * chunks, [&](int64_t task) {
    thread_local std::vector<float> v, m;
    const int64_t grp = task / chunks, chunk = task % chunks;
    const int64_t t0 = grp * per_group;
    const int nt = static_cast<int>(std::min(per_group, tiles - t0));
    v.resize(static_cast<size_t>(kWinogradPoints * s.in_blocks * nt * s.block));
    m.resize(static_cast<size_t>(kWinogradPoints * 2 * nt * s.block));
    st.input(s, x, t0, nt, v.data());
    const int64_t ob0 = chunk * per_chunk;
    const int64_t ob1 = std::min(s.out_blocks, ob0 + per_chunk);
    st.output(s, v.data(), t0, nt, u, ob0, ob1, bias, residual, ep, m.data(), y);
  });
}

}  // namespace sampan::cpu
