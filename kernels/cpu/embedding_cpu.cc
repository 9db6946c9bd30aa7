#include "kernels/cpu/embedding_cpu.h"

#include "kernels/common/dtype.h"
#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {

void embedding(int64_t n_tokens, const int32_t* ids, const void* table, DType table_type,
               int64_t vocab, int64_t dim, float* y, int64_t ldy, TaskRunner& runner) {
  if (n_tokens <= 0 || dim <= 0) return;
  const auto* base = static_cast<const unsigned char*>(table);
  const int64_t row_bytes = dtype_storage_bytes(table_type, dim);
  // Pure copying: a task moves at least ~64 KB of output, below which a thread hand-off costs
  // more than it saves.
  const int64_t grain = dim >= 16384 ? 1 : 16384 / dim;
  util::parallel_for(runner, n_tokens, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      convert_to_f32(table_type, base + ids[t] * row_bytes, y + t * ldy, dim);
    }
  });
}

}  // namespace sampan::cpu
