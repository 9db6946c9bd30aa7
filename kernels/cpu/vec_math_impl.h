// exp, erf, tanh and GELU written once over a vector-operations struct O (vec_avx2.h's Avx2,
// vec_avx512.h's Avx512), so that the 8-lane AVX2 forms (avx2_math.h: the element-wise ops and
// the matmuls' fused epilogue) and the 16-lane AVX-512 ones (avx512_math.h) run the same
// operations in the same order on every lane and so give the same bits. Algorithms and
// accuracy: avx2_math.h. O provides V (the vector), M (a lane mask), set1, add, sub, mul, div,
// fma (a * b + c), fnma (c - a * b), min, max, round (to nearest integer), abs, sign (the sign
// bits of a), or_, gt / ge (ordered compares), select(m, a, b) (a where m, else b) and
// pow2_split(p, n): p * 2^(n >> 1) * 2^(n - (n >> 1)) for an integral n in [-126, 128] (two
// factors so that n = 128 does not overflow the exponent field).
// Include only from files built for O's instruction set.
#pragma once

namespace sampan::cpu::vec_math {

template <class O>
inline typename O::V exp(typename O::V x) {
  using V = typename O::V;
  x = O::min(O::max(x, O::set1(-87.3f)), O::set1(88.7f));
  const V n = O::round(O::mul(x, O::set1(1.44269504088896341f)));
  // ln 2 split so that n * hi is exact.
  V r = O::fnma(n, O::set1(0.693359375f), x);
  r = O::fnma(n, O::set1(-2.12194440e-4f), r);
  V p = O::set1(1.9875691500e-4f);
  p = O::fma(p, r, O::set1(1.3981999507e-3f));
  p = O::fma(p, r, O::set1(8.3334519073e-3f));
  p = O::fma(p, r, O::set1(4.1665795894e-2f));
  p = O::fma(p, r, O::set1(1.6666665459e-1f));
  p = O::fma(p, r, O::set1(5.0000001201e-1f));
  p = O::fma(p, O::mul(r, r), O::add(r, O::set1(1.0f)));
  return O::pow2_split(p, n);
}

template <class O>
inline typename O::V sigmoid(typename O::V x) {
  const typename O::V one = O::set1(1.0f);
  return O::div(one, O::add(one, exp<O>(O::sub(O::set1(0.0f), x))));
}

template <class O>
inline typename O::V erf(typename O::V a) {
  using V = typename O::V;
  const V t = O::abs(a);
  const V s = O::mul(a, a);
  // |a| <= 0.927734375: erf(a) = a + a * P(a^2).
  V p = O::set1(-5.96761703e-4f);
  p = O::fma(p, s, O::set1(4.99119423e-3f));
  p = O::fma(p, s, O::set1(-2.67681349e-2f));
  p = O::fma(p, s, O::set1(1.12819925e-1f));
  p = O::fma(p, s, O::set1(-3.76125336e-1f));
  p = O::fma(p, s, O::set1(1.28379166e-1f));
  const V small = O::fma(p, a, a);
  // Beyond: erf(|a|) = 1 - exp(Q(|a|)).
  V r = O::fma(O::set1(-1.72853470e-5f), t, O::set1(3.83197126e-4f));
  const V u = O::fma(O::set1(-3.88396438e-3f), t, O::set1(2.42546219e-2f));
  r = O::fma(r, s, u);
  r = O::fma(r, t, O::set1(-1.06777877e-1f));
  r = O::fma(r, t, O::set1(-6.34846687e-1f));
  r = O::fma(r, t, O::set1(-1.28717512e-1f));
  r = O::fma(r, t, O::sub(O::set1(0.0f), t));
  V large = O::sub(O::set1(1.0f), exp<O>(r));
  large = O::or_(large, O::sign(a));  // copysign (large >= 0)
  return O::select(O::gt(t, O::set1(0.927734375f)), large, small);
}

template <class O>
inline typename O::V tanh(typename O::V x) {
  using V = typename O::V;
  const V t = O::abs(x);
  // |x| < 0.4: odd Taylor series through x^13 (the next term is below 2e-9 there).
  const V s = O::mul(x, x);
  V p = O::set1(21844.0f / 6081075.0f);
  p = O::fma(p, s, O::set1(-1382.0f / 155925.0f));
  p = O::fma(p, s, O::set1(62.0f / 2835.0f));
  p = O::fma(p, s, O::set1(-17.0f / 315.0f));
  p = O::fma(p, s, O::set1(2.0f / 15.0f));
  p = O::fma(p, s, O::set1(-1.0f / 3.0f));
  const V small = O::fma(O::mul(p, s), x, x);
  const V one = O::set1(1.0f);
  const V e = exp<O>(O::add(t, t));
  V large = O::sub(one, O::div(O::set1(2.0f), O::add(e, one)));
  large = O::or_(large, O::sign(x));
  return O::select(O::ge(t, O::set1(0.4f)), large, small);
}

// GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)); the unary Gelu op and every fused epilogue
// (bias_activation) evaluate exactly this, so fusing changes no bit.
template <class O>
inline typename O::V gelu(typename O::V x) {
  const typename O::V e = erf<O>(O::mul(x, O::set1(0.70710678118654752f)));
  return O::mul(O::mul(O::set1(0.5f), x), O::add(O::set1(1.0f), e));
}

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
template <class O>
inline typename O::V gelu_tanh(typename O::V x) {
  const typename O::V x3 = O::mul(O::mul(x, x), x);
  const typename O::V u =
      O::mul(O::set1(0.79788456080286536f), O::fma(O::set1(0.044715f), x3, x));
  return O::mul(O::mul(O::set1(0.5f), x), O::add(O::set1(1.0f), tanh<O>(u)));
}

}  // namespace sampan::cpu::vec_math
