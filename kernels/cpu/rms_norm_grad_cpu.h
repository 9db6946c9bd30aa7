// RMSNorm backward (y = x / sqrt(mean(x²) + eps) * w, rms_norm_cpu.h) as templates instantiated
// for float (the graph op) and double (the gradient checks). Sums run in double in both.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// The forward, for finite differences. x, y: [rows, dim] contiguous; w: [dim].
template <class T>
void rms_norm_ref(int64_t rows, int64_t dim, const T* x, const T* w, double eps, T* y);

// With r = 1 / sqrt(mean(x²) + eps) per row:
//   dx = r (w ⊙ dy) - x r³ / dim · Σ (w ⊙ dy ⊙ x),   dw = Σ_rows dy ⊙ x r.
// x, dy, dx: [rows, dim] with row strides ldx, lddy, lddx; w: [dim]. dw: [dim] or null (not
// wanted; it is summed over rows serially, so it does not depend on the thread count).
template <class T>
void rms_norm_backward(int64_t rows, int64_t dim, const T* x, int64_t ldx, const T* w, const T* dy,
                       int64_t lddy, double eps, T* dx, int64_t lddx, T* dw, TaskRunner& runner);

}  // namespace sampan::cpu
