// Device-side decoding of GGUF (llama.cpp) block-quantized weights, shared by the block-type GEMV,
// the bf16 dequantization of the prefill path (gemm_ggml.cu) and the embedding lookup
// (embedding_ggml.cu). Include from .cu files only.
//
// Unit of work: a "unit" is 32 consecutive elements of a row; every supported block type is a
// whole number of units (32-element types: one unit per block; 256-element types: eight), and
// each unit depends only on its own block's bytes. ggml_decode32<T>(block, u, w) writes the 32
// f32 values of unit u (0 <= u < block_size / 32) of the block at `block`.
//
// Exactness: the values are bit for bit those of the reference kernels/cpu/ggml_dequant.h: the
// same f32 operations in the same order. Where the formula is a * b + c, the product a * b is
// exact (at most 11 + 6 + 5 significant bits, as ggml_dequant.h notes), so the fused fmaf used
// here rounds once, as the reference's separate multiply and add do; every other step is a
// single f32 multiply or subtraction of the same operands. f16 fields convert to f32 exactly
// (subnormals included; nothing here flushes denormals: no fast-math). The IQ4 codebook is
// looked up with byte permutes (no memory, no divergence).
//
// Alignment: blocks are read with 16-bit loads, so `block` needs only 2-byte alignment (every
// supported type's block size in bytes is even, so a 2-byte aligned row keeps all its blocks
// 2-byte aligned, as a GGUF file's 32-byte aligned tensor data and the engine's uploads do).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/ggml_type.h"

namespace sampan::cuda::ggml {

// f16 at byte offset `off` (even) of a 2-byte aligned block, exactly as f32.
__device__ __forceinline__ float f16_at(const uint8_t* b, int off) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(b + off)));
}

// kBytes (a multiple of 4) bytes from a 2-byte aligned address as little-endian 32-bit words.
template <int kBytes>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[kBytes / 4]) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
  for (int i = 0; i < kBytes / 4; ++i) {
    w[i] = static_cast<uint32_t>(__ldg(h + 2 * i)) |
           static_cast<uint32_t>(__ldg(h + 2 * i + 1)) << 16;
  }
}

// Byte i of an array of words (i a compile-time constant after unrolling).
template <int N>
__device__ __forceinline__ uint32_t byte_of(const uint32_t (&w)[N], int i) {
  return (w[i / 4] >> (8 * (i % 4))) & 0xffu;
}

// The IQ4_NL / IQ4_XS codebook kv (ggml_dequant.h) as four little-endian words of int8.
__device__ __forceinline__ float iq4_value(uint32_t n) {
  // {-127, -104, -83, -65}, {-49, -35, -22, -10}, {1, 13, 25, 38}, {53, 69, 89, 113}
  constexpr uint32_t k0 = 0xbfad9881u, k1 = 0xf6eaddcfu, k2 = 0x26190d01u, k3 = 0x71594535u;
  const uint32_t lo = __byte_perm(k0, k1, n & 7u), hi = __byte_perm(k2, k3, n & 7u);
  const uint32_t b = ((n & 8u) ? hi : lo) & 0xffu;
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(b)));
}

// The 6-bit scale and min of sub-block j (< 8) of a Q4_K / Q5_K block, from its 12 scale bytes
// as three words s0..s2 (register shifts only: j is a run-time index).
__device__ __forceinline__ void k_scale_min(uint32_t s0, uint32_t s1, uint32_t s2, int j, int* sc,
                                            int* mn) {
  const int sh = 8 * (j & 3);
  const uint32_t b0 = (s0 >> sh) & 0xffu;  // byte j & 3
  const uint32_t b1 = (s1 >> sh) & 0xffu;  // byte 4 + (j & 3)
  const uint32_t b2 = (s2 >> sh) & 0xffu;  // byte 8 + (j & 3)
  if (j < 4) {
    *sc = static_cast<int>(b0 & 63);
    *mn = static_cast<int>(b1 & 63);
  } else {  // b[j + 4] = b2, b[j - 4] = b0, b[j] = b1
    *sc = static_cast<int>((b2 & 15) | (b0 >> 6) << 4);
    *mn = static_cast<int>((b2 >> 4) | (b1 >> 6) << 4);
  }
}

template <GgmlType T>
__device__ __forceinline__ void decode32(const uint8_t* b, int u, float (&w)[32]);

template <>
__device__ __forceinline__ void decode32<GgmlType::kQ4_0>(const uint8_t* b, int, float (&w)[32]) {
  const float d = f16_at(b, 0);
  uint32_t q[4];
  load_words<16>(b + 2, q);
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const uint32_t v = byte_of(q, l);
    w[l] = d * static_cast<float>(static_cast<int>(v & 15) - 8);
    w[l + 16] = d * static_cast<float>(static_cast<int>(v >> 4) - 8);
  }
}

template <>
__device__ __forceinline__ void decode32<GgmlType::kQ4_1>(const uint8_t* b, int, float (&w)[32]) {
  const float d = f16_at(b, 0), m = f16_at(b, 2);
  uint32_t q[4];
  load_words<16>(b + 4, q);
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const uint32_t v = byte_of(q, l);
    w[l] = fmaf(d, static_cast<float>(v & 15), m);
    w[l + 16] = fmaf(d, static_cast<float>(v >> 4), m);
  }
}

template <>
__device__ __forceinline__ void decode32<GgmlType::kQ5_0>(const uint8_t* b, int, float (&w)[32]) {
  const float d = f16_at(b, 0);
  uint32_t h[1], q[4];
  load_words<4>(b + 2, h);
  load_words<16>(b + 6, q);
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const uint32_t v = byte_of(q, l);
    const int q0 = static_cast<int>((v & 15) | ((h[0] >> l) & 1) << 4);
    const int q1 = static_cast<int>((v >> 4) | ((h[0] >> (l + 16)) & 1) << 4);
    w[l] = d * static_cast<float>(q0 - 16);
    w[l + 16] = d * static_cast<float>(q1 - 16);
  }
}

template <>
__device__ __forceinline__ void decode32<GgmlType::kQ5_1>(const uint8_t* b, int, float (&w)[32]) {
  const float d = f16_at(b, 0), m = f16_at(b, 2);
  uint32_t h[1], q[4];
  load_words<4>(b + 4, h);
  load_words<16>(b + 8, q);
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const uint32_t v = byte_of(q, l);
    const uint32_t q0 = (v & 15) | ((h[0] >> l) & 1) << 4;
    const uint32_t q1 = (v >> 4) | ((h[0] >> (l + 16)) & 1) << 4;
    w[l] = fmaf(d, static_cast<float>(q0), m);
    w[l + 16] = fmaf(d, static_cast<float>(q1), m);
  }
}

template <>
__device__ __forceinline__ void decode32<GgmlType::kQ8_0>(const uint8_t* b, int, float (&w)[32]) {
  const float d = f16_at(b, 0);
  uint32_t q[8];
  load_words<32>(b + 2, q);
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    w[l] = d * static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(byte_of(q, l))));
  }
}

template <>
__device__ __forceinline__ void decode32<GgmlType::kIQ4_NL>(const uint8_t* b, int, float (&w)[32]) {
  const float d = f16_at(b, 0);
  uint32_t q[4];
  load_words<16>(b + 2, q);
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const uint32_t v = byte_of(q, l);
    w[l] = d * iq4_value(v & 15);
    w[l + 16] = d * iq4_value(v >> 4);
  }
}

// Q2_K: unit u = 4 a + s holds elements 128 a + 32 s + l.
template <>
__device__ __forceinline__ void decode32<GgmlType::kQ2_K>(const uint8_t* b, int u, float (&w)[32]) {
  const int a = u >> 2, s = u & 3;
  const float d = f16_at(b, 80), dmin = f16_at(b, 82);
  const auto* sc16 = reinterpret_cast<const unsigned short*>(b);  // sc[2u], sc[2u + 1]
  const uint32_t scp = __ldg(sc16 + u);
  uint32_t q[8];
  load_words<32>(b + 16 + 32 * a, q);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t sc = (scp >> (8 * h)) & 0xffu;
    const float dl = d * static_cast<float>(sc & 15);
    const float ml = dmin * static_cast<float>(sc >> 4);
#pragma unroll
    for (int l = 16 * h; l < 16 * h + 16; ++l) {
      w[l] = fmaf(dl, static_cast<float>((byte_of(q, l) >> (2 * s)) & 3), -ml);
    }
  }
}

// Q3_K: unit u = 4 a + s; its hmask bit is u.
template <>
__device__ __forceinline__ void decode32<GgmlType::kQ3_K>(const uint8_t* b, int u, float (&w)[32]) {
  const int a = u >> 2, s = u & 3;
  const float d = f16_at(b, 108);
  uint32_t hm[8], q[8], scw[3];
  load_words<32>(b, hm);
  load_words<32>(b + 32 + 32 * a, q);
  load_words<12>(b + 96, scw);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j = 2 * u + h;
    // lo: scales[j] & 15 (j < 8) or scales[j - 8] >> 4; hi: scales[8 + j % 4] >> 2 (j / 4).
    const int idx = j & 7;
    const uint32_t byte = ((idx < 4 ? scw[0] : scw[1]) >> (8 * (idx & 3))) & 0xffu;
    const uint32_t lo = j < 8 ? (byte & 15) : (byte >> 4);
    const uint32_t hi = (scw[2] >> (8 * (j % 4) + 2 * (j / 4))) & 3;
    const float dl = d * static_cast<float>(static_cast<int>(lo | hi << 4) - 32);
#pragma unroll
    for (int l = 16 * h; l < 16 * h + 16; ++l) {
      const int qv = static_cast<int>((byte_of(q, l) >> (2 * s)) & 3) -
                     (((byte_of(hm, l) >> u) & 1) ? 0 : 4);
      w[l] = dl * static_cast<float>(qv);
    }
  }
}

template <bool kQ5>
__device__ __forceinline__ void decode32_k45(const uint8_t* b, int j, float (&w)[32]) {
  const float d = f16_at(b, 0), dmin = f16_at(b, 2);
  uint32_t scw[3];
  load_words<12>(b + 4, scw);
  int sc, mn;
  k_scale_min(scw[0], scw[1], scw[2], j, &sc, &mn);
  const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
  constexpr int kQs = kQ5 ? 48 : 16;
  uint32_t q[8];
  load_words<32>(b + kQs + 32 * (j / 2), q);
  const int shift = 4 * (j % 2);
  uint32_t qh[8] = {};
  if constexpr (kQ5) load_words<32>(b + 16, qh);
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    uint32_t v = (byte_of(q, l) >> shift) & 15;
    if constexpr (kQ5) v |= ((byte_of(qh, l) >> j) & 1) << 4;
    w[l] = fmaf(dl, static_cast<float>(v), -ml);
  }
}

template <>
__device__ __forceinline__ void decode32<GgmlType::kQ4_K>(const uint8_t* b, int u, float (&w)[32]) {
  decode32_k45<false>(b, u, w);
}

template <>
__device__ __forceinline__ void decode32<GgmlType::kQ5_K>(const uint8_t* b, int u, float (&w)[32]) {
  decode32_k45<true>(b, u, w);
}

// Q6_K: unit u = 4 a + s holds elements 128 a + 32 s + l.
template <>
__device__ __forceinline__ void decode32<GgmlType::kQ6_K>(const uint8_t* b, int u, float (&w)[32]) {
  const int a = u >> 2, s = u & 3;
  const float d = f16_at(b, 208);
  uint32_t lo[8], hi[8];
  load_words<32>(b + 64 * a + 32 * (s & 1), lo);
  load_words<32>(b + 128 + 32 * a, hi);
  const uint32_t scp = __ldg(reinterpret_cast<const unsigned short*>(b + 192) + u);
  const int lshift = 4 * (s >> 1), hshift = 2 * s;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int sc = static_cast<int8_t>(static_cast<uint8_t>((scp >> (8 * h)) & 0xffu));
    const float dl = d * static_cast<float>(sc);
#pragma unroll
    for (int l = 16 * h; l < 16 * h + 16; ++l) {
      const int qv = static_cast<int>(((byte_of(lo, l) >> lshift) & 15) |
                                      ((byte_of(hi, l) >> hshift) & 3) << 4) - 32;
      w[l] = dl * static_cast<float>(qv);
    }
  }
}

// IQ4_XS: unit j holds elements 32 j + l, nibbles of qs[16 j .. 16 j + 15].
template <>
__device__ __forceinline__ void decode32<GgmlType::kIQ4_XS>(const uint8_t* b, int j,
                                                            float (&w)[32]) {
  const float d = f16_at(b, 0);
  const uint32_t scales_h = __ldg(reinterpret_cast<const unsigned short*>(b + 2));
  const uint32_t sl = __ldg(reinterpret_cast<const unsigned short*>(b + 4) + j / 4);
  const uint32_t lsb = (sl >> (8 * ((j / 2) % 2))) & 0xffu;  // scales_l[j / 2]
  const int ls = static_cast<int>(((lsb >> (4 * (j % 2))) & 15) | ((scales_h >> (2 * j)) & 3) << 4);
  const float dl = d * static_cast<float>(ls - 32);
  uint32_t q[4];
  load_words<16>(b + 8 + 16 * j, q);
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const uint32_t v = byte_of(q, l);
    w[l] = dl * iq4_value(v & 15);
    w[l + 16] = dl * iq4_value(v >> 4);
  }
}

}  // namespace sampan::cuda::ggml

// One `case` per supported block type t, each `return FN<t>(args...);` (C++17: no template
// lambdas): switch (type) { SAMPAN_GGML_TYPE_CASES(fn, a, b) default: ...; }
#define SAMPAN_GGML_TYPE_CASE(T, FN, ...) \
  case ::sampan::GgmlType::T:             \
    return FN<::sampan::GgmlType::T>(__VA_ARGS__);
#define SAMPAN_GGML_TYPE_CASES(FN, ...)              \
  SAMPAN_GGML_TYPE_CASE(kQ4_0, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ4_1, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ5_0, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ5_1, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ8_0, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ2_K, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ3_K, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ4_K, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ5_K, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kQ6_K, FN, __VA_ARGS__)      \
  SAMPAN_GGML_TYPE_CASE(kIQ4_NL, FN, __VA_ARGS__)    \
  SAMPAN_GGML_TYPE_CASE(kIQ4_XS, FN, __VA_ARGS__)
