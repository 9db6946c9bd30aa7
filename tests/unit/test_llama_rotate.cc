// rotate_llama_weights: a plain double-precision Llama forward, written here, gives the same
// logits for the original weights and for the rotated ones (with the online block Hadamard
// before down_proj), and the rotation spreads an outlier channel.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/models/llama_rotate.h"
#include "engine/runtime/causal_lm.h"
#include "kernels/common/half.h"
#include "kernels/cpu/isa.h"

namespace sampan::models {
namespace {

using Mat = std::vector<double>;  // row-major

struct Spec {
  const char* name;
  int64_t hidden, n_head, n_head_kv, head_dim, intermediate;
  bool tied, bias_qkv, bias_o, bias_mlp;
  DType dtype;
  int64_t ffn_block;  // the down_proj Hadamard block expected for `intermediate`
};

HfConfig make_config(const Spec& s) {
  HfConfig c;
  c.source = s.name;
  c.vocab_size = 53;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.n_layer = 2;
  c.n_head = s.n_head;
  c.n_head_kv = s.n_head_kv;
  c.head_dim = s.head_dim;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = s.tied;
  c.bias_q = c.bias_k = c.bias_v = s.bias_qkv;
  c.bias_o = s.bias_o;
  c.bias_mlp = s.bias_mlp;
  return c;
}

// A [rows, cols] tensor of `dtype` with N(0, sd) entries.
Tensor random_tensor(std::mt19937& rng, Shape shape, DType dtype, double sd) {
  std::normal_distribution<float> dist(0.0f, static_cast<float>(sd));
  const int64_t n = shape_numel(shape);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    switch (dtype) {
      case DType::kF32: t.data<float>()[i] = v; break;
      case DType::kF16: t.data<uint16_t>()[i] = f32_to_f16(v); break;
      case DType::kBF16: t.data<uint16_t>()[i] = f32_to_bf16(v); break;
      default: FAIL("unexpected dtype");
    }
  }
  return t;
}

// Norm weights around 1 with some spread, as trained models have.
Tensor random_norm(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> dist(0.5f, 1.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return Tensor::from_f32({n}, v);
}

Linear random_linear(std::mt19937& rng, int64_t out, int64_t in, bool bias, DType dtype) {
  Linear l;
  l.weight = random_tensor(rng, {out, in}, dtype, 1.0 / std::sqrt(double(in)));
  if (bias) l.bias = random_tensor(rng, {out}, DType::kF32, 0.1);
  return l;
}

LlamaWeights make_weights(std::mt19937& rng, const HfConfig& c, DType dtype) {
  LlamaWeights w;
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  w.tok_embd = random_tensor(rng, {c.vocab_size, d}, dtype, 1.0);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LlamaLayerWeights l;
    l.attn_norm = random_norm(rng, d);
    l.attn.q = random_linear(rng, c.q_dim(), d, c.bias_q, dtype);
    l.attn.k = random_linear(rng, c.kv_dim(), d, c.bias_k, dtype);
    l.attn.v = random_linear(rng, c.kv_dim(), d, c.bias_v, dtype);
    l.attn.o = random_linear(rng, d, c.q_dim(), c.bias_o, dtype);
    l.ffn_norm = random_norm(rng, d);
    l.gate = random_linear(rng, f, d, c.bias_mlp, dtype);
    l.up = random_linear(rng, f, d, c.bias_mlp, dtype);
    l.down = random_linear(rng, d, f, c.bias_mlp, dtype);
    w.layers.push_back(l);
  }
  w.output_norm = random_norm(rng, d);
  if (c.tie_word_embeddings) {
    w.output.weight = w.tok_embd;
  } else {
    w.output = random_linear(rng, c.vocab_size, d, false, dtype);
  }
  return w;
}

Mat to_double(const Tensor& t) {
  const Tensor f = t.to_f32();
  return Mat(f.data<float>(), f.data<float>() + f.numel());
}

// y [rows, out] = x [rows, in] · Wᵀ + b.
Mat linear_ref(const Mat& x, int64_t rows, const Linear& l) {
  const Mat w = to_double(l.weight);
  const int64_t out = l.weight.dim(0), in = l.weight.dim(1);
  const Mat b = l.bias.defined() ? to_double(l.bias) : Mat(size_t(out), 0.0);
  Mat y(size_t(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[size_t(o)];
      for (int64_t i = 0; i < in; ++i) acc += x[size_t(r * in + i)] * w[size_t(o * in + i)];
      y[size_t(r * out + o)] = acc;
    }
  }
  return y;
}

Mat rms_norm_ref(const Mat& x, int64_t rows, int64_t d, const Tensor& g, double eps) {
  const Mat gw = to_double(g);
  Mat y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += x[size_t(r * d + i)] * x[size_t(r * d + i)];
    const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
    for (int64_t i = 0; i < d; ++i) y[size_t(r * d + i)] = x[size_t(r * d + i)] * inv * gw[size_t(i)];
  }
  return y;
}

// HF rotate_half RoPE (theta 10000) on every head of x [rows, n_heads * hd]; row r is position r.
void rope_ref(Mat& x, int64_t rows, int64_t n_heads, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < n_heads; ++h) {
      double* v = x.data() + r * n_heads * hd + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(r) * std::pow(10000.0, -2.0 * double(i) / double(hd));
        const double a = v[i], b = v[i + half];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

// x [rows, n]: each block of `block` columns times the normalised Sylvester H (built by the
// recursion, entries ±1), i.e. the online transform the graph applies before down_proj.
void block_hadamard_ref(Mat& x, int64_t rows, int64_t n, int64_t block) {
  std::vector<int> h{1};
  for (int64_t m = 1; m < block; m *= 2) {
    std::vector<int> next(size_t(4 * m * m));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        const int v = h[size_t(i * m + j)];
        next[size_t(i * 2 * m + j)] = v;
        next[size_t(i * 2 * m + m + j)] = v;
        next[size_t((i + m) * 2 * m + j)] = v;
        next[size_t((i + m) * 2 * m + m + j)] = -v;
      }
    }
    h.swap(next);
  }
  const double s = 1.0 / std::sqrt(double(block));
  std::vector<double> tmp(static_cast<size_t>(block));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      double* v = x.data() + r * n + b0;
      for (int64_t i = 0; i < block; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < block; ++j) acc += h[size_t(i * block + j)] * v[j];
        tmp[size_t(i)] = acc * s;
      }
      std::copy(tmp.begin(), tmp.end(), v);
    }
  }
}

// Logits [T, vocab] of one sequence of tokens at positions 0 .. T-1, causal attention.
Mat forward_ref(const HfConfig& c, const LlamaWeights& w, const std::vector<int>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size()), d = c.hidden_size, hd = c.head_dim;
  const int64_t f = c.intermediate_size, group = c.n_head / c.n_head_kv;
  const Mat embd = to_double(w.tok_embd);
  Mat x(size_t(T * d));
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(embd.begin() + ids[size_t(t)] * d, d, x.begin() + t * d);
  }
  for (const LlamaLayerWeights& l : w.layers) {
    const Mat h = rms_norm_ref(x, T, d, l.attn_norm, c.rms_norm_eps);
    Mat q = linear_ref(h, T, l.attn.q), k = linear_ref(h, T, l.attn.k);
    const Mat v = linear_ref(h, T, l.attn.v);
    rope_ref(q, T, c.n_head, hd);
    rope_ref(k, T, c.n_head_kv, hd);
    Mat a(size_t(T * c.q_dim()), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t head = 0; head < c.n_head; ++head) {
        const int64_t kvh = head / group;
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i) {
            dot += q[size_t(t * c.q_dim() + head * hd + i)] * k[size_t(u * c.kv_dim() + kvh * hd + i)];
          }
          s[size_t(u)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[size_t(u)]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u) {
          for (int64_t i = 0; i < hd; ++i) {
            a[size_t(t * c.q_dim() + head * hd + i)] +=
                s[size_t(u)] / sum * v[size_t(u * c.kv_dim() + kvh * hd + i)];
          }
        }
      }
    }
    const Mat o = linear_ref(a, T, l.attn.o);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    const Mat h2 = rms_norm_ref(x, T, d, l.ffn_norm, c.rms_norm_eps);
    const Mat g = linear_ref(h2, T, l.gate), up = linear_ref(h2, T, l.up);
    Mat act(size_t(T * f));
    for (size_t i = 0; i < act.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * up[i];
    if (w.down_hadamard_block > 0) block_hadamard_ref(act, T, f, w.down_hadamard_block);
    const Mat down = linear_ref(act, T, l.down);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  return linear_ref(rms_norm_ref(x, T, d, w.output_norm, c.rms_norm_eps), T, w.output);
}

double max_abs(const Mat& m) {
  double r = 0;
  for (double v : m) r = std::max(r, std::fabs(v));
  return r;
}

double max_rel_diff(const Mat& a, const Mat& b) {
  double r = 0;
  for (size_t i = 0; i < a.size(); ++i) r = std::max(r, std::fabs(a[i] - b[i]));
  return r / max_abs(a);
}

const Spec kSpecs[] = {
    // GQA 6:2, every bias, tied embeddings, residual blocks of 32 (96 = 3 x 32), intermediate
    // 688 = 43 x 16 (the shape of 11008 = 43 x 256, scaled down).
    {"gqa-biases-tied", 96, 6, 2, 16, 688, true, true, true, true, DType::kBF16, 16},
    // Qwen2-like: q/k/v biases only, untied, head_dim 48 (not a power of two: per-head blocks of
    // 16), q width 192 != hidden 128, intermediate 352 = 11 x 32, f16 weights.
    {"qwen2-like", 128, 4, 1, 48, 352, false, true, false, false, DType::kF16, 32},
    // Plain Llama, f32 weights, MHA, power-of-two everything.
    {"llama-f32", 64, 4, 4, 16, 256, false, false, false, false, DType::kF32, 256},
};

TEST_CASE("rotated weights give the original logits", "[models][rotate]") {
  for (const Spec& spec : kSpecs) {
    INFO(spec.name);
    std::mt19937 rng(21);
    const HfConfig c = make_config(spec);
    const LlamaWeights original = make_weights(rng, c, spec.dtype);
    std::vector<int> ids{3, 17, 52, 0, 9, 41, 17};
    const Mat want = forward_ref(c, original, ids);

    LlamaWeights rotated = original;
    rotate_llama_weights(c, rotated, 1234);
    CHECK(rotated.down_hadamard_block == spec.ffn_block);
    // The original tensors are untouched (a mapped file may be read-only and shared).
    CHECK(max_rel_diff(forward_ref(c, original, ids), want) == 0.0);

    const Mat got = forward_ref(c, rotated, ids);
    INFO("max relative difference " << max_rel_diff(want, got));
    // Rotated weights are the exact orthogonal transform rounded once to f32 (relative 6e-8 per
    // entry); through two layers the logits move by a few 1e-7 of their scale. 1e-5 is a wide
    // margin, while a wrong sign, block or missing transform changes logits by O(1).
    CHECK(max_rel_diff(want, got) < 1e-5);

    // Another seed: other weights, same function.
    LlamaWeights other = original;
    rotate_llama_weights(c, other, 99);
    CHECK(max_rel_diff(to_double(rotated.layers[0].attn.q.weight),
                       to_double(other.layers[0].attn.q.weight)) > 0.1);
    CHECK(max_rel_diff(want, forward_ref(c, other, ids)) < 1e-5);
  }
}

TEST_CASE("rotation hands each linear to its callback once its transforms are final",
          "[models][rotate]") {
  // The loader quantizes there (one matrix in f32 at a time), so what the callback sees must be
  // each matrix's final rotated weights, in checkpoint names, each linear exactly once.
  for (const Spec& spec : kSpecs) {
    INFO(spec.name);
    std::mt19937 rng(5);
    const HfConfig c = make_config(spec);
    const LlamaWeights original = make_weights(rng, c, spec.dtype);
    LlamaWeights plain = original;
    rotate_llama_weights(c, plain, 77);

    LlamaWeights cb = original;
    std::vector<std::string> names;
    std::vector<Tensor> seen;
    rotate_llama_weights(c, cb, 77, [&](Linear& l, const std::string& name) {
      names.push_back(name);
      seen.push_back(l.weight);
      l.weight = Tensor();  // as a quantizer replaces it: nothing may read it after the call
    });
    std::vector<std::string> want_names{"lm_head"};
    std::vector<const Tensor*> want{&plain.output.weight};
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      const LlamaLayerWeights& l = plain.layers[static_cast<size_t>(i)];
      for (auto [n, t] : {std::pair<const char*, const Tensor*>{"self_attn.q_proj", &l.attn.q.weight},
                          {"self_attn.k_proj", &l.attn.k.weight}, {"self_attn.v_proj", &l.attn.v.weight},
                          {"self_attn.o_proj", &l.attn.o.weight}, {"mlp.gate_proj", &l.gate.weight},
                          {"mlp.up_proj", &l.up.weight}, {"mlp.down_proj", &l.down.weight}}) {
        want_names.push_back(p + n);
        want.push_back(t);
      }
    }
    REQUIRE(names == want_names);
    for (size_t j = 0; j < want.size(); ++j) {
      INFO(names[j]);
      REQUIRE(seen[j].dtype() == DType::kF32);
      REQUIRE(seen[j].shape() == want[j]->shape());
      REQUIRE(std::memcmp(seen[j].raw(), want[j]->raw(), static_cast<size_t>(seen[j].nbytes())) == 0);
    }
    // What is not a linear is rotated as without the callback.
    CHECK(std::memcmp(cb.tok_embd.raw(), plain.tok_embd.raw(), static_cast<size_t>(plain.tok_embd.nbytes())) == 0);
    CHECK(cb.down_hadamard_block == plain.down_hadamard_block);
  }
}

// Row 2-norms of W·diag(g) (g null: of W).
std::vector<double> row_norms(const Tensor& w, const Tensor* g) {
  const Mat m = to_double(w);
  const Mat gw = g != nullptr ? to_double(*g) : Mat(size_t(w.dim(1)), 1.0);
  std::vector<double> out(size_t(w.dim(0)));
  for (int64_t r = 0; r < w.dim(0); ++r) {
    double ss = 0;
    for (int64_t i = 0; i < w.dim(1); ++i) {
      const double v = m[size_t(r * w.dim(1) + i)] * gw[size_t(i)];
      ss += v * v;
    }
    out[size_t(r)] = std::sqrt(ss);
  }
  return out;
}

double max_rel_vec_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double r = 0;
  for (size_t i = 0; i < a.size(); ++i) r = std::max(r, std::fabs(a[i] - b[i]) / a[i]);
  return r;
}

TEST_CASE("rotated weights are owned f32, norms are ones, rotations keep row norms",
          "[models][rotate]") {
  const Spec& spec = kSpecs[0];  // tied, every bias
  std::mt19937 rng(22);
  const HfConfig c = make_config(spec);
  const LlamaWeights original = make_weights(rng, c, spec.dtype);
  LlamaWeights rotated = original;
  rotate_llama_weights(c, rotated, 7);

  auto check_matrix = [](const Tensor& t) {
    CHECK(t.dtype() == DType::kF32);
    CHECK(t.is_contiguous());
  };
  auto check_ones = [&](const Tensor& t) {
    REQUIRE(t.dtype() == DType::kF32);
    REQUIRE(t.numel() == c.hidden_size);
    for (int64_t i = 0; i < t.numel(); ++i) CHECK(t.data<float>()[i] == 1.0f);
  };
  check_matrix(rotated.tok_embd);
  check_matrix(rotated.output.weight);
  check_ones(rotated.output_norm);
  // Untied: lm_head has its own storage now (it folds output_norm, the embedding does not).
  CHECK(rotated.output.weight.storage() != rotated.tok_embd.storage());
  for (size_t i = 0; i < rotated.layers.size(); ++i) {
    const LlamaLayerWeights& l = rotated.layers[i];
    const LlamaLayerWeights& o = original.layers[i];
    check_ones(l.attn_norm);
    check_ones(l.ffn_norm);
    for (const Linear* lin : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.gate, &l.up, &l.down}) {
      check_matrix(lin->weight);
      if (lin->bias.defined()) CHECK(lin->bias.dtype() == DType::kF32);
    }
    // Readers: rows of W·diag(g) only get an orthogonal transform on their input side, so
    // their norms stay (to f32 rounding, 1e-6 relative with margin).
    CHECK(max_rel_vec_diff(row_norms(o.attn.q.weight, &o.attn_norm), row_norms(l.attn.q.weight, nullptr)) < 1e-6);
    CHECK(max_rel_vec_diff(row_norms(o.gate.weight, &o.ffn_norm), row_norms(l.gate.weight, nullptr)) < 1e-6);
    // Writers: Qᵀ·W keeps column norms, W·H_f keeps row norms; the Frobenius norm stays.
    auto frob = [](const Tensor& w) {
      double s = 0;
      for (double v : to_double(w)) s += v * v;
      return std::sqrt(s);
    };
    CHECK(frob(l.down.weight) == Approx(frob(o.down.weight)).epsilon(1e-6));
    CHECK(frob(l.attn.o.weight) == Approx(frob(o.attn.o.weight)).epsilon(1e-6));
    // V: H per head on its output side, Q on its input side, after the norm fold.
    double v_norm2 = 0;
    for (double n : row_norms(o.attn.v.weight, &o.attn_norm)) v_norm2 += n * n;
    CHECK(frob(l.attn.v.weight) == Approx(std::sqrt(v_norm2)).epsilon(1e-6));
  }
  // Embedding rows keep their norms: E·Q.
  CHECK(max_rel_vec_diff(row_norms(original.tok_embd, nullptr), row_norms(rotated.tok_embd, nullptr)) < 1e-6);
}

// max |w| / rms(w) of each row, averaged over rows: about sqrt(in) when one input channel
// dominates the row, a small constant (~3-4 for Gaussian rows) when the mass is spread.
double mean_peak_to_rms(const Mat& w, int64_t rows, int64_t in) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = 0, ss = 0;
    for (int64_t i = 0; i < in; ++i) {
      const double v = w[size_t(r * in + i)];
      mx = std::max(mx, std::fabs(v));
      ss += v * v;
    }
    total += mx / std::sqrt(ss / double(in));
  }
  return total / double(rows);
}

TEST_CASE("the rotation spreads an outlier channel", "[models][rotate]") {
  // Hidden 256 (one block of 256), an outlier input channel 50x the others in q_proj, as a
  // massive-activation channel folded from its norm weight looks.
  const Spec spec{"outlier", 256, 4, 2, 64, 512, false, false, false, false, DType::kF32, 512};
  std::mt19937 rng(23);
  HfConfig c = make_config(spec);
  c.n_layer = 1;
  LlamaWeights w = make_weights(rng, c, spec.dtype);
  const int64_t d = c.hidden_size, kOutlier = 77;
  w.layers[0].attn_norm.data<float>()[kOutlier] = 50.0f;
  // Before: W·diag(g), the matrix a quantizer would see once the norm is folded.
  Mat before = to_double(w.layers[0].attn.q.weight);
  const Mat g = to_double(w.layers[0].attn_norm);
  for (int64_t r = 0; r < c.q_dim(); ++r) {
    for (int64_t i = 0; i < d; ++i) before[size_t(r * d + i)] *= g[size_t(i)];
  }
  rotate_llama_weights(c, w, 5);
  const double peak_before = mean_peak_to_rms(before, c.q_dim(), d);
  const double peak_after = mean_peak_to_rms(to_double(w.layers[0].attn.q.weight), c.q_dim(), d);
  INFO("max/rms before " << peak_before << " after " << peak_after);
  // Before: the outlier holds most of each row's energy, max/rms near sqrt(256) = 16 (measured
  // ~12). After: spread over 256 channels, close to a Gaussian row's ~3.5. A factor 2.5 is a
  // wide margin on both sides.
  CHECK(peak_before > 8.0);
  CHECK(peak_after < peak_before / 2.5);
}

TEST_CASE("rotation refuses rotated or quantized weights", "[models][rotate]") {
  std::mt19937 rng(24);
  const HfConfig c = make_config(kSpecs[2]);
  LlamaWeights w = make_weights(rng, c, DType::kF32);
  LlamaWeights twice = w;
  rotate_llama_weights(c, twice, 1);
  try {
    rotate_llama_weights(c, twice, 1);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find("already rotated") != std::string::npos);
  }
  LlamaWeights quantized = w;
  quantized.layers[1].up.weight = Tensor::zeros({c.intermediate_size, c.hidden_size / 2}, DType::kI8);
  try {
    rotate_llama_weights(c, quantized, 1);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
  }
  LlamaWeights wrong = w;
  wrong.layers[0].down.weight = Tensor::zeros({c.hidden_size, c.intermediate_size + 1}, DType::kF32);
  CHECK_THROWS_WITH(rotate_llama_weights(c, wrong, 1), Catch::Contains("layers.0.down_proj"));
}

// Through the real engine: the graph applies the online Hadamard before down_proj (the
// "hadamard" op) and the fusion passes run. The tiny HF models cover tied bf16 Llama-3 with
// intermediate 172 = 43 x 4, Mistral (f32, sliding window, intermediate 136 = 17 x 8) and Qwen2
// (f16, q/k/v biases).
using runtime::CausalLm;
using runtime::CausalLmOptions;

TEST_CASE("CausalLm with --hadamard gives the logits of the original model", "[models][rotate]") {
  // The AMX GEMM rounds f16 weights to bf16 (gemm_cpu.h), which would separate the stored f16
  // model from its rotated f32 copy by ~2^-8 for reasons unrelated to the rotation. The
  // AVX-512/AVX2 paths keep every weight and activation in f32.
  const cpu::Isa saved = cpu::active_isa();
  if (saved == cpu::Isa::kAmx) REQUIRE(cpu::set_isa(cpu::Isa::kAvx512));
  struct Restore {
    cpu::Isa isa;
    ~Restore() { cpu::set_isa(isa); }
  } restore{saved};
  for (const char* name : {"tiny_llama3", "tiny_mistral", "tiny_qwen2"}) {
    INFO(name);
    const std::string dir = std::string(SAMPAN_SOURCE_DIR) + "/tests/data/models/" + name;
    CausalLmOptions plain;
    plain.threads = 2;
    plain.max_context = 64;
    CausalLmOptions rotated = plain;
    rotated.build.hadamard.enabled = true;
    rotated.build.hadamard.seed = 3;
    auto a = CausalLm::load(dir, plain);
    auto b = CausalLm::load(dir, rotated);
    const std::vector<int32_t> ids{1, 15, 200, 7, 42, 99, 3, 250, 17, 64, 5};
    const Tensor la = a->forward(ids, true), lb = b->forward(ids, true);
    REQUIRE(la.shape() == lb.shape());
    const Mat da = to_double(la), db = to_double(lb);
    // Both run in f32, the stored 16-bit weights widened exactly, so only f32 rounding in
    // different orders separates them (measured <= 4e-7 of the logit scale); a missing or
    // wrong online transform moves logits by O(1).
    INFO("max relative difference " << max_rel_diff(da, db));
    CHECK(max_rel_diff(da, db) < 1e-5);
  }
}

}  // namespace
}  // namespace sampan::models
