#include "kernels/cpu/embedding_grad_cpu.h"

#include <algorithm>

namespace sampan::cpu {

template <class T>
void embedding_backward(int64_t n, const int32_t* ids, const T* dy, int64_t lddy, int64_t vocab,
                        int64_t dim, T* dtable) {
  std::fill(dtable, dtable + vocab * dim, T(0));
  for (int64_t i = 0; i < n; ++i) {
    T* row = dtable + static_cast<int64_t>(ids[i]) * dim;
    for (int64_t c = 0; c < dim; ++c) row[c] += dy[i * lddy + c];
  }
}

template void embedding_backward<float>(int64_t, const int32_t*, const float*, int64_t, int64_t,
                                        int64_t, float*);
template void embedding_backward<double>(int64_t, const int32_t*, const double*, int64_t, int64_t,
                                         int64_t, double*);

}  // namespace sampan::cpu
