// Embedding backward: the table gradient is a scatter-add of the output gradient rows onto the
// rows of the ids looked up. Serial in id order, so repeated ids add up in a fixed order.
#pragma once

#include <cstdint>

namespace sampan::cpu {

// ids: [n] (each in [0, vocab), checked by the caller); dy: [n, dim] row stride lddy;
// dtable: [vocab, dim] contiguous, overwritten.
template <class T>
void embedding_backward(int64_t n, const int32_t* ids, const T* dy, int64_t lddy, int64_t vocab,
                        int64_t dim, T* dtable);

}  // namespace sampan::cpu
