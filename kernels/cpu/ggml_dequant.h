// Reference dequantization of GGUF (llama.cpp) block-quantized rows to f32: scalar, portable,
// and exact as specified below. The GGUF loader's embedding lookup calls it per token row; the
// SIMD decoders of the GEMM kernels (gemm_ggml.h) are tested bit for bit against it, and it is
// tested bit for bit against the `gguf` Python package's dequantize (tests/data/ggml).
//
// Formats (public layout of llama.cpp's ggml-common.h; all multi-byte fields little-endian, "f16"
// an IEEE half, converted to f32 exactly). A row of k elements is k / block_size consecutive
// blocks; below, `e` is the element index inside a block and every arithmetic step is one f32
// operation rounded to nearest, in the order written (the order the reference uses):
//
//  Q4_0   32 elem, 18 B: f16 d, u8 qs[16].  n = e < 16 ? qs[e] & 15 : qs[e-16] >> 4
//         y = d * (n - 8)
//  Q4_1   32 elem, 20 B: f16 d, f16 m, u8 qs[16].  n as Q4_0;  y = d * n + m
//  Q5_0   32 elem, 22 B: f16 d, u32 qh, u8 qs[16].  n as Q4_0, h = (qh >> e) & 1
//         y = d * ((n | h << 4) - 16)
//  Q5_1   32 elem, 24 B: f16 d, f16 m, u32 qh, u8 qs[16].  y = d * (n | h << 4) + m
//  Q8_0   32 elem, 34 B: f16 d, i8 qs[32].  y = d * qs[e]
//  Q2_K  256 elem, 84 B: u8 sc[16], u8 qs[64], f16 d, f16 dmin.  e = 128 a + 32 s + l:
//         q = (qs[32 a + l] >> 2 s) & 3;  j = e / 16
//         y = (d * (sc[j] & 15)) * q - dmin * (sc[j] >> 4)
//  Q3_K  256 elem, 110 B: u8 hmask[32], u8 qs[64], u8 scales[12], f16 d.  e = 128 a + 32 s + l:
//         q = ((qs[32 a + l] >> 2 s) & 3) - (((hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4)
//         6-bit scale j = e / 16: lo = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4,
//         hi = (scales[8 + j % 4] >> 2 (j / 4)) & 3;  y = (d * ((lo | hi << 4) - 32)) * q
//  Q4_K  256 elem, 144 B: f16 d, f16 dmin, u8 scales[12], u8 qs[128].  e = 64 c + 32 h + l:
//         q = (qs[32 c + l] >> 4 h) & 15;  j = e / 32 = 2 c + h, with b = scales:
//         sc = j < 4 ? b[j] & 63 : (b[j+4] & 15) | (b[j-4] >> 6) << 4
//         mn = j < 4 ? b[j+4] & 63 : (b[j+4] >> 4) | (b[j] >> 6) << 4
//         y = (d * sc) * q - dmin * mn
//  Q5_K  256 elem, 176 B: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128].  As Q4_K with
//         q |= ((qh[e % 32] >> (e / 32)) & 1) << 4
//  Q6_K  256 elem, 210 B: u8 ql[128], u8 qh[64], i8 sc[16], f16 d.  e = 128 a + 32 s + l
//         (s = 0..3, l < 32): lo = (ql[64 a + 32 (s & 1) + l] >> 4 (s >> 1)) & 15,
//         hi = (qh[32 a + l] >> 2 s) & 3;  y = (d * sc[e / 16]) * ((lo | hi << 4) - 32)
//  IQ4_NL 32 elem, 18 B: f16 d, u8 qs[16].  n as Q4_0;  y = d * kv[n] with the codebook
//         kv = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
//  IQ4_XS 256 elem, 136 B: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128].  e = 32 j + 16 h + l:
//         n = (qs[16 j + l] >> 4 h) & 15;  ls = ((scales_l[j / 2] >> 4 (j % 2)) & 15) |
//         ((scales_h >> 2 j) & 3) << 4;  y = (d * (ls - 32)) * kv[n]
//
//  MXFP4  32 elem, 17 B: u8 e (E8M0), u8 qs[16].  n as Q4_0;  d = 2^(e - 128) (for e < 2 the
//         f32 subnormal 2^21 << e times 2^-149: the same value);  y = kv4[n] * d with the FP4
//         E2M1 codebook doubled: kv4 = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
//  TQ2_0 256 elem, 66 B: u8 qs[64], f16 d.  e = 128 a + 32 l + m:
//         q = (qs[32 a + m] >> 2 l) & 3;  y = (q - 1) * d
//  TQ1_0 256 elem, 54 B: u8 qs[48], u8 qh[4], f16 d.  Base-3 digits: digit n of byte b is
//         t(b, n) = ((u8)(b * 3^n) * 3) >> 8 (an 8-bit product, then the top of a 10-bit one).
//         e < 160: t(qs[e % 32], e / 32);  160 <= e < 240: f = e - 160, t(qs[32 + f % 16], f / 16);
//         e >= 240: f = e - 240, t(qh[f % 4], f / 4);  y = (t - 1) * d
//
// Every product of the form a * b + c above has an exact product (at most 11 + 6 + 5 significant
// bits), so a compiler that contracts it into an FMA gets the same bits: the result does not
// depend on -ffp-contract. Non-finite f16 scales give non-finite outputs, as in the reference.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/common/ggml_type.h"

namespace sampan::cpu {

// Dequantizes one row: src holds ggml_row_bytes(t, k) bytes (any alignment), dst receives k
// floats exactly as the formulas above. Preconditions (the caller checks them with
// ggml_block_type_supported and ggml_row_bytes; this function does not throw or assert): t is a
// supported block type and k a non-negative multiple of its block size. An unsupported type or
// negative k writes nothing; a k that is not a whole number of blocks dequantizes the whole blocks
// and leaves the last k % block_size floats unwritten. So a violated precondition never reads
// past ggml_row_bytes(t, k - k % block_size) bytes or writes past dst[k].
void dequantize_ggml_row(GgmlType t, const void* src /*[ggml_row_bytes(t, k)] bytes*/,
                         float* dst /*[k]*/, int64_t k);

// The IQ4_NL / IQ4_XS codebook (kv above), for the SIMD kernels.
extern const int8_t kIq4Values[16];
// The MXFP4 codebook (kv4 above).
extern const int8_t kMxfp4Values[16];
// MXFP4's scale: 2^(e - 128) as llama.cpp's GGML_E8M0_TO_FP32_HALF gives it.
float mxfp4_scale(uint8_t e);
// The 6-bit scale and min of sub-block j (< 8) of a Q4_K / Q5_K block, from its 12 scale bytes
// (scales: the block's bytes 4..15).
void k_scale_min(const uint8_t* scales /*[12]*/, int j, int* sc, int* mn);

// The 6-bit scale of sub-block j (< 16) of a Q3_K block, minus 32 (scales: the block's bytes
// 96..107): low 4 bits from byte j (j < 8) or byte j - 8's high nibble, top 2 bits from byte
// 8 + j % 4 at bit 2 (j / 4).
inline int q3_k_scale(const uint8_t* scales /*[12]*/, int j) {
  const int lo = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4;
  const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | hi << 4) - 32;
}

// The 6-bit scale ls of sub-block j (< 8) of an IQ4_XS block b, minus 32: nibble j of bytes
// 4..7, the top 2 bits at bit 2 j of the u16 at byte 2.
inline int iq4_xs_scale(const uint8_t* b /*[136]*/, int j) {
  const unsigned scales_h = b[2] | b[3] << 8;
  const int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
  const int hi = static_cast<int>((scales_h >> (2 * j)) & 3);
  return (lo | hi << 4) - 32;
}

// All eight of them at once (for the SIMD kernels), as bytes 0..7 of sc and mn: j < 4 from the
// low 6 bits of bytes j and j + 4, j >= 4 from byte j + 4's nibbles plus the top 2 bits of bytes
// j - 4 and j.
inline void k_scales_min8(const uint8_t* scales /*[12]*/, uint64_t* sc, uint64_t* mn) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, scales, 4);
  std::memcpy(&u1, scales + 4, 4);
  std::memcpy(&u2, scales + 8, 4);
  const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
  const uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
  *sc = (u0 & 0x3f3f3f3fu) | static_cast<uint64_t>(sc_hi) << 32;
  *mn = (u1 & 0x3f3f3f3fu) | static_cast<uint64_t>(mn_hi) << 32;
}

}  // namespace sampan::cpu
