#include "kernels/cpu/transpose_cpu.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

// Enough bytes per task that handing it to a worker costs less than the copy itself.
constexpr int64_t kMinTaskBytes = 32 * 1024;
// Tile edge of the 2-D transpose: a 32 x 32 tile of 8-byte words (8 KiB) is read and written
// within L1, so both the strided side and the contiguous side touch each cache line once.
constexpr int64_t kTile = 32;

// One dim of the simplified copy: its size and the strides of x and y along it.
struct Dim {
  int64_t n, xs, ys;
};

// Drops size-1 dims and merges neighbours that are contiguous with each other in both x and y
// (outermost first), so e.g. a [B, H, S, D] -> [B, S, H, D] copy becomes a 3-D one with whole
// D-rows and a 2-D transpose becomes exactly two dims.
std::vector<Dim> simplify(int rank, const int64_t* shape, const int64_t* xs, const int64_t* ys) {
  std::vector<Dim> dims;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty()) {
      Dim& o = dims.back();
      if (o.xs == xs[d] * shape[d] && o.ys == ys[d] * shape[d]) {
        o = {o.n * shape[d], xs[d], ys[d]};
        continue;
      }
    }
    dims.push_back({shape[d], xs[d], ys[d]});
  }
  return dims;
}

// Offsets in x and y of the element at linear (row-major) index `i` over `dims`.
void unravel(const std::vector<Dim>& dims, int64_t i, int64_t& xo, int64_t& yo) {
  xo = 0;
  yo = 0;
  for (size_t d = dims.size(); d-- > 0;) {
    const int64_t k = i % dims[d].n;
    i /= dims[d].n;
    xo += k * dims[d].xs;
    yo += k * dims[d].ys;
  }
}

// Every dim but the last is walked as an outer index; the last as a row (memcpy when it is
// contiguous in both, a strided loop otherwise).
template <class T>
void copy_rows(const std::vector<Dim>& dims, const T* x, T* y, TaskRunner& runner) {
  const int last = static_cast<int>(dims.size()) - 1;
  const Dim in = dims[static_cast<size_t>(last)];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= dims[static_cast<size_t>(d)].n;
  const bool dense = in.xs == 1 && in.ys == 1;
  const int64_t row_bytes = in.n * static_cast<int64_t>(sizeof(T));
  const int64_t grain = row_bytes >= kMinTaskBytes ? 1 : kMinTaskBytes / row_bytes;
  util::parallel_for(runner, rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t xo, yo;
      unravel(dims, r * in.n, xo, yo);  // the row's first element
      if (dense) {
        std::memcpy(y + yo, x + xo, static_cast<size_t>(row_bytes));
        continue;
      }
      for (int64_t k = 0; k < in.n; ++k) y[yo + k * in.ys] = x[xo + k * in.xs];
    }
  });
}

// Dims p (the innermost) and q are tiled; one of them is contiguous in x and the other in y, so
// within a tile both sides stay in cache. Tasks are (outer index, band of q tiles).
template <class T>
void copy_tiled(const std::vector<Dim>& dims, int q, const T* x, T* y, TaskRunner& runner) {
  const int p = static_cast<int>(dims.size()) - 1;
  const Dim dp = dims[static_cast<size_t>(p)], dq = dims[static_cast<size_t>(q)];
  int64_t outer = 1;
  for (int d = 0; d < p; ++d) {
    if (d != q) outer *= dims[static_cast<size_t>(d)].n;
  }
  const int64_t q_tiles = util::ceil_div(dq.n, kTile);
  const int64_t band_bytes = kTile * dp.n * static_cast<int64_t>(sizeof(T));
  const int64_t grain = band_bytes >= kMinTaskBytes ? 1 : kMinTaskBytes / band_bytes;
  util::parallel_for(runner, outer * q_tiles, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t o = u / q_tiles, q0 = (u % q_tiles) * kTile;
      const int64_t q1 = q0 + kTile < dq.n ? q0 + kTile : dq.n;
      int64_t xo, yo;
      // The outer index alone: unravel over the dims other than p and q.
      int64_t rest = o;
      xo = 0;
      yo = 0;
      for (int d = p; d-- > 0;) {
        if (d == q) continue;
        const Dim& dd = dims[static_cast<size_t>(d)];
        const int64_t k = rest % dd.n;
        rest /= dd.n;
        xo += k * dd.xs;
        yo += k * dd.ys;
      }
      for (int64_t p0 = 0; p0 < dp.n; p0 += kTile) {
        const int64_t p1 = p0 + kTile < dp.n ? p0 + kTile : dp.n;
        if (dp.ys == 1 && dq.xs == 1) {
          // The usual case (y's rows are x's columns): the unit strides are spelled out so the
          // compiler sees contiguous stores. Walking the tile by q columns keeps each x cache
          // line in use for kTile consecutive stores.
          for (int64_t iq = q0; iq < q1; ++iq) {
            const T* xr = x + xo + iq;
            T* yr = y + yo + iq * dq.ys;
            for (int64_t ip = p0; ip < p1; ++ip) yr[ip] = xr[ip * dp.xs];
          }
          continue;
        }
        for (int64_t iq = q0; iq < q1; ++iq) {
          const T* xr = x + xo + iq * dq.xs;
          T* yr = y + yo + iq * dq.ys;
          for (int64_t ip = p0; ip < p1; ++ip) yr[ip * dp.ys] = xr[ip * dp.xs];
        }
      }
    }
  });
}

template <class T>
void copy_typed(int rank, const int64_t* shape, const T* x, const int64_t* xs, T* y,
                const int64_t* ys, TaskRunner& runner) {
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return;
  }
  const std::vector<Dim> dims = simplify(rank, shape, xs, ys);
  if (dims.empty()) {  // a single element
    *y = *x;
    return;
  }
  const int p = static_cast<int>(dims.size()) - 1;
  const Dim& dp = dims[static_cast<size_t>(p)];
  // A transpose: the innermost dim is contiguous on one side only and another dim is
  // contiguous on the other side (the largest such, for the longest tiles).
  if ((dp.ys == 1) != (dp.xs == 1) && dp.n >= 4) {
    int q = -1;
    for (int d = 0; d < p; ++d) {
      const Dim& dd = dims[static_cast<size_t>(d)];
      const bool other = dp.ys == 1 ? dd.xs == 1 : dd.ys == 1;
      if (other && dd.n >= 4) q = d;
    }
    if (q >= 0) {
      copy_tiled(dims, q, x, y, runner);
      return;
    }
  }
  copy_rows(dims, x, y, runner);
}

}  // namespace

void copy_strided(int rank, const int64_t* shape, const void* x, const int64_t* x_strides,
                  void* y, const int64_t* y_strides, int elem_bytes, TaskRunner& runner) {
  switch (elem_bytes) {
    case 1:
      copy_typed(rank, shape, static_cast<const uint8_t*>(x), x_strides, static_cast<uint8_t*>(y),
                 y_strides, runner);
      return;
    case 2:
      copy_typed(rank, shape, static_cast<const uint16_t*>(x), x_strides,
                 static_cast<uint16_t*>(y), y_strides, runner);
      return;
    case 4:
      copy_typed(rank, shape, static_cast<const uint32_t*>(x), x_strides,
                 static_cast<uint32_t*>(y), y_strides, runner);
      return;
    case 8:
      copy_typed(rank, shape, static_cast<const uint64_t*>(x), x_strides,
                 static_cast<uint64_t*>(y), y_strides, runner);
      return;
    default:
      break;  // the launchers refuse other sizes (packed i4) before calling
  }
}

void transpose(int rank, const int64_t* x_shape, const int* perm, const void* x, void* y,
               int elem_bytes, TaskRunner& runner) {
  std::vector<int64_t> x_strides(static_cast<size_t>(rank));
  int64_t s = 1;
  for (int d = rank; d-- > 0;) {
    x_strides[static_cast<size_t>(d)] = s;
    s *= x_shape[d];
  }
  std::vector<int64_t> shape(static_cast<size_t>(rank)), xs(static_cast<size_t>(rank)),
      ys(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    shape[static_cast<size_t>(d)] = x_shape[perm[d]];
    xs[static_cast<size_t>(d)] = x_strides[static_cast<size_t>(perm[d])];
  }
  s = 1;
  for (int d = rank; d-- > 0;) {
    ys[static_cast<size_t>(d)] = s;
    s *= shape[static_cast<size_t>(d)];
  }
  copy_strided(rank, shape.data(), x, xs.data(), y, ys.data(), elem_bytes, runner);
}

}  // namespace sampan::cpu
