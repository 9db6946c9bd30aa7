// AVX-512 instantiation of the attention inner loop (every KV format): twice the lanes for the
// q·k dot products and the V accumulation, which dominate decode at long contexts.
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/vec_avx512.h"
#include "kernels/cpu/kv_quant_impl.h"

namespace sampan::cpu::detail {

void attention_range_avx512(const AttentionRange& a) { attention_range_any<Avx512>(a); }

}  // namespace sampan::cpu::detail
