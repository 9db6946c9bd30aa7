// Causal grouped-query self-attention over whole padded sequences (training form, no KV cache),
// forward and backward, as templates for float (the graph ops) and double (the gradient checks).
//
// Layout: B sequences of T rows each, row b * T + t. q: [B*T, H*D], k and v: [B*T, Hkv*D],
// o: [B*T, H*D], lse: [B*T, H]; head h reads kv head h / (H / Hkv). Row t of sequence b attends
// to rows lo..t of its sequence, lo = max(0, t - window + 1) with a sliding window (window > 0)
// and 0 otherwise, for t < lengths[b]; rows t >= lengths[b] are padding: their o, lse and every
// gradient flowing from them are 0 and nobody attends to them.
// The forward keeps the log-sum-exp of each row's scaled scores so the backward recomputes the
// probabilities instead of storing the [T, T] matrix. Softmax sums run in double.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

struct CausalAttentionDims {
  int64_t batch = 0;       // B
  int64_t seq_len = 0;     // T
  int64_t n_heads = 0;     // H, a multiple of n_kv_heads
  int64_t n_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;    // D
  double scale = 1.0;      // applied to q·k
  int64_t window = 0;      // 0: none
  // The f32 kernels only (the templates ignore it): every product on bf16-rounded operands with
  // f32 sums, as bf16 mixed precision runs attention: Q, K, V, dO and the probabilities P and
  // dS (as the softmax steps write them) rounded to nearest even where they enter a product;
  // softmax, log-sum-exp and D = rowsum(dO * O) stay f32/double. Taken where the CPU multiplies
  // bf16 fast (AMX tiles, or AVX512-BF16 where bf16_panels_preferred()); elsewhere the f32
  // products run (more precise, and there no slower).
  bool bf16_products = false;
};

// Row strides: ldq, ldk, ldv, ldo in elements; lse contiguous [B*T, H]. lengths: [B], each in
// [0, T] (the caller checks).
template <class T>
void causal_attention_forward(const CausalAttentionDims& d, const T* q, int64_t ldq, const T* k,
                              int64_t ldk, const T* v, int64_t ldv, const int32_t* lengths, T* o,
                              int64_t ldo, T* lse, TaskRunner& runner);

// From dO (and the forward's q, k, v, o, lse): dq [B*T, H*D], dk and dv [B*T, Hkv*D], all
// overwritten (row strides lddq, lddk, lddv). Split over (sequence, kv head), so dk and dv have
// one writer each and the result does not depend on the thread count.
template <class T>
void causal_attention_backward(const CausalAttentionDims& d, const T* q, int64_t ldq, const T* k,
                               int64_t ldk, const T* v, int64_t ldv, const int32_t* lengths,
                               const T* o, int64_t ldo, const T* lse, const T* dout, int64_t lddo,
                               T* dq, int64_t lddq, T* dk, int64_t lddk, T* dv, int64_t lddv,
                               TaskRunner& runner);

// The f32 kernels of the graph ops: the same contracts as the templates above (which are their
// specification), with every product on the f32 GEMM (gemm_cpu.h): per (sequence, head) the
// scores S = Q·Kᵀ, O = P·V, and in the backward dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q, dV = Pᵀ·dO,
// taken per block of 64 query rows over the keys the block sees, with K, V and the transposed
// operands packed into per-task scratch: O(T·(D + 64)) floats per worker (with bf16_products
// on a CPU that takes them, O(T² + T·D): those kernels are not blocked yet). The forward splits
// over (sequence, head), the backward over (sequence, kv head).
// Their softmax steps run in f32 on a vector exp (~1 ulp), each row's sum of exponentials
// finished in double: within 1e-5 of the templates (test_autograd).
void causal_attention_forward_f32(const CausalAttentionDims& d, const float* q, int64_t ldq,
                                  const float* k, int64_t ldk, const float* v, int64_t ldv,
                                  const int32_t* lengths, float* o, int64_t ldo, float* lse,
                                  TaskRunner& runner);
void causal_attention_backward_f32(const CausalAttentionDims& d, const float* q, int64_t ldq,
                                   const float* k, int64_t ldk, const float* v, int64_t ldv,
                                   const int32_t* lengths, const float* o, int64_t ldo,
                                   const float* lse, const float* dout, int64_t lddo, float* dq,
                                   int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                                   TaskRunner& runner);

}  // namespace sampan::cpu
