// AVX-512 instantiation of the attention inner loops, every KV format: the per-token loop
// (kv_quant_impl.h) and the prefill kernel (attention_prefill_impl.h). Twice the lanes for the
// q·k products and the V accumulation, which dominate decode at long contexts and prefill.
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/vec_avx512.h"
#include "kernels/cpu/kv_quant_impl.h"
#include "kernels/cpu/attention_prefill_impl.h"

namespace sampan::cpu::detail {

void attention_range_avx512(const AttentionRange& a) { attention_range_any<Avx512>(a); }
void attention_prefill_avx512(const PrefillBlock& a) { prefill_block_any<Avx512>(a); }

}  // namespace sampan::cpu::detail
