// Scalar reference dequantization of GGUF block types (formulas in ggml_dequant.h). One function
// per type decodes one block; every field is read byte by byte (memcpy for the f16 and u32 ones)
// so any source alignment works, as in an mmapped file.
#include "kernels/cpu/ggml_dequant.h"

#include <cstring>

#include "kernels/common/half.h"

namespace sampan::cpu {

const int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

const int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The loops below run over runs of contiguous elements with fixed shifts so that the compiler
// vectorizes them (this code also serves the GEMM for types without a SIMD decoder).

void block_q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>((qs[l] & 15) - 8);
    y[l + 16] = d * static_cast<float>((qs[l] >> 4) - 8);
  }
}

void block_q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>(qs[l] & 15) + m;
    y[l + 16] = d * static_cast<float>(qs[l] >> 4) + m;
  }
}

void block_q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint32_t qh = u32_at(b + 2);
  const uint8_t* qs = b + 6;
  for (int l = 0; l < 16; ++l) {
    const int q0 = (qs[l] & 15) | static_cast<int>((qh >> l) & 1) << 4;
    const int q1 = (qs[l] >> 4) | static_cast<int>((qh >> (l + 16)) & 1) << 4;
    y[l] = d * static_cast<float>(q0 - 16);
    y[l + 16] = d * static_cast<float>(q1 - 16);
  }
}

void block_q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint32_t qh = u32_at(b + 4);
  const uint8_t* qs = b + 8;
  for (int l = 0; l < 16; ++l) {
    const int q0 = (qs[l] & 15) | static_cast<int>((qh >> l) & 1) << 4;
    const int q1 = (qs[l] >> 4) | static_cast<int>((qh >> (l + 16)) & 1) << 4;
    y[l] = d * static_cast<float>(q0) + m;
    y[l + 16] = d * static_cast<float>(q1) + m;
  }
}

void block_q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int e = 0; e < 32; ++e) y[e] = d * static_cast<float>(static_cast<int8_t>(b[2 + e]));
}

void block_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int a = 0; a < 2; ++a) {
    for (int s = 0; s < 4; ++s) {
      for (int h = 0; h < 2; ++h) {  // 16-element sub-block j of elements 128 a + 32 s + 16 h
        const int j = 8 * a + 2 * s + h;
        const float dl = d * static_cast<float>(sc[j] & 15);
        const float ml = dmin * static_cast<float>(sc[j] >> 4);
        const uint8_t* q = qs + 32 * a + 16 * h;
        float* out = y + 16 * j;
        for (int l = 0; l < 16; ++l) out[l] = dl * static_cast<float>((q[l] >> (2 * s)) & 3) - ml;
      }
    }
  }
}

void block_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = f16_at(b + 108);
  for (int a = 0; a < 2; ++a) {
    for (int s = 0; s < 4; ++s) {
      const int bit = 4 * a + s;  // (128 a + 32 s + l) / 32: the hmask bit of these elements
      for (int h = 0; h < 2; ++h) {
        const int j = 8 * a + 2 * s + h;
        const float dl = d * static_cast<float>(q3_k_scale(scales, j));
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int q = ((qs[32 * a + l] >> (2 * s)) & 3) - (((hmask[l] >> bit) & 1) ? 0 : 4);
          y[32 * bit + l] = dl * static_cast<float>(q);
        }
      }
    }
  }
}

void block_q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    k_scale_min(b + 4, j, &sc, &mn);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * static_cast<float>((q[l] >> shift) & 15) - ml;
  }
}

void block_q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    k_scale_min(b + 4, j, &sc, &mn);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 15) | ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = dl * static_cast<float>(v) - ml;
    }
  }
}

void block_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int a = 0; a < 2; ++a) {
    for (int s = 0; s < 4; ++s) {
      const uint8_t* lo = ql + 64 * a + 32 * (s & 1);
      const uint8_t* hi = qh + 32 * a;
      const int lshift = 4 * (s >> 1), hshift = 2 * s;
      for (int h = 0; h < 2; ++h) {
        const float dl = d * static_cast<float>(sc[8 * a + 2 * s + h]);
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int q = (((lo[l] >> lshift) & 15) | ((hi[l] >> hshift) & 3) << 4) - 32;
          y[128 * a + 32 * s + l] = dl * static_cast<float>(q);
        }
      }
    }
  }
}

void block_iq4_nl(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>(kIq4Values[qs[l] & 15]);
    y[l + 16] = d * static_cast<float>(kIq4Values[qs[l] >> 4]);
  }
}

void block_iq4_xs(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(iq4_xs_scale(b, j));
    const uint8_t* q = qs + 16 * j;
    for (int l = 0; l < 16; ++l) {
      y[32 * j + l] = dl * static_cast<float>(kIq4Values[q[l] & 15]);
      y[32 * j + l + 16] = dl * static_cast<float>(kIq4Values[q[l] >> 4]);
    }
  }
}

void block_mxfp4(const uint8_t* b, float* y) {
  const float d = mxfp4_scale(b[0]);
  const uint8_t* qs = b + 1;
  for (int l = 0; l < 16; ++l) {
    y[l] = static_cast<float>(kMxfp4Values[qs[l] & 15]) * d;
    y[l + 16] = static_cast<float>(kMxfp4Values[qs[l] >> 4]) * d;
  }
}

void block_tq2_0(const uint8_t* b, float* y) {
  const float d = f16_at(b + 64);
  for (int a = 0; a < 2; ++a) {
    for (int l = 0; l < 4; ++l) {
      for (int m = 0; m < 32; ++m) {
        const int q = (b[32 * a + m] >> (2 * l)) & 3;
        y[128 * a + 32 * l + m] = static_cast<float>(q - 1) * d;
      }
    }
  }
}

// Digit n of a TQ1_0 byte (ggml_dequant.h).
inline int trit(uint8_t byte, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto q = static_cast<uint8_t>(byte * kPow3[n]);
  return (static_cast<uint16_t>(q) * 3) >> 8;
}

void block_tq1_0(const uint8_t* b, float* y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 48;
  const float d = f16_at(b + 52);
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) y[32 * n + m] = static_cast<float>(trit(qs[m], n) - 1) * d;
  }
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 16; ++m) {
      y[160 + 16 * n + m] = static_cast<float>(trit(qs[32 + m], n) - 1) * d;
    }
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) y[240 + 4 * n + j] = static_cast<float>(trit(qh[j], n) - 1) * d;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return block_q4_0;
    case GgmlType::kQ4_1: return block_q4_1;
    case GgmlType::kQ5_0: return block_q5_0;
    case GgmlType::kQ5_1: return block_q5_1;
    case GgmlType::kQ8_0: return block_q8_0;
    case GgmlType::kQ2_K: return block_q2_k;
    case GgmlType::kQ3_K: return block_q3_k;
    case GgmlType::kQ4_K: return block_q4_k;
    case GgmlType::kQ5_K: return block_q5_k;
    case GgmlType::kQ6_K: return block_q6_k;
    case GgmlType::kIQ4_NL: return block_iq4_nl;
    case GgmlType::kIQ4_XS: return block_iq4_xs;
    case GgmlType::kMXFP4: return block_mxfp4;
    case GgmlType::kTQ2_0: return block_tq2_0;
    case GgmlType::kTQ1_0: return block_tq1_0;
    default: return nullptr;
  }
}

}  // namespace

void k_scale_min(const uint8_t* b, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = b[j] & 63;
    *mn = b[j + 4] & 63;
  } else {
    *sc = (b[j + 4] & 15) | (b[j - 4] >> 6) << 4;
    *mn = (b[j + 4] >> 4) | (b[j] >> 6) << 4;
  }
}

void dequantize_ggml_row(GgmlType t, const void* src, float* dst, int64_t k) {
  const BlockFn fn = block_fn(t);
  if (fn == nullptr || k <= 0) return;
  const int64_t bs = ggml_block_size(t), bytes = ggml_type_size(t);
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i + bs <= k; i += bs, p += bytes) fn(p, dst + i);
}

}  // namespace sampan::cpu
