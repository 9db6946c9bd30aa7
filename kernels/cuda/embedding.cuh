// Token embedding lookup on the GPU: rows of a [vocab, dim] table gathered and converted to f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/ggml_type.h"

namespace sampan::cuda {

// ids: [n_tokens], device memory, every id in [0, vocab) (the caller validates; an id outside
// is never read through and its output row is NaN, so a bug shows instead of reading out of
// bounds). table: [vocab, dim] contiguous, of table_type kF32, kF16 or kBF16. y: [n_tokens,
// dim] f32 with row stride ldy. Device pointers; queued on `stream`. Returns the cudaError_t of
// the launch (cudaErrorInvalidValue for another table type).
int embedding(int64_t n_tokens, const int32_t* ids, const void* table, DType table_type,
              int64_t vocab, int64_t dim, float* y, int64_t ldy, cudaStream_t stream);

// The same lookup from a table of GGUF blocks (embedding_ggml.cu): table is u8 [vocab,
// ggml_row_bytes(type, dim)] (2-byte aligned), type one of the supported block types
// (ggml_block_type_supported), dim a multiple of its block size. Each looked-up row is
// dequantized bit for bit as cpu::dequantize_ggml_row (kernels/cpu/ggml_dequant.h) does; ids
// as above (an id outside [0, vocab) gives a NaN row). Returns the cudaError_t of the launch
// (cudaErrorInvalidValue for another type, a dim that is not whole blocks or a misaligned table).
int embedding_ggml(int64_t n_tokens, const int32_t* ids, const void* table, GgmlType type,
                   int64_t vocab, int64_t dim, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
