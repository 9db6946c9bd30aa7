// QuaRot-style offline rotation of Llama weights (llama_rotate.h): which transform goes where.
// The weight math itself (conversion to f32, the Walsh-Hadamard along rows or down columns) is
// quant/rotate.h's, so this builder calls no kernel.
#include "engine/models/llama_rotate.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/mapped_file.h"
#include "engine/core/thread_pool.h"
#include "kernels/common/hadamard_block.h"
#include "quant/rotate.h"

namespace sampan::models {
namespace {

bool is_plain_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// An owned, contiguous f32 copy of a float tensor (never a view of a mapped file, which may be
// read-only and is shared with the caller).
Tensor owned_f32(const Tensor& t, const std::string& what, ThreadPool& pool) {
  SAMPAN_CHECK(is_plain_float(t.dtype()), ErrorCode::kInvalidArgument,
               "rotate_llama_weights: {} is {} ({}); rotation needs float weights, so rotate "
               "before quantizing",
               what, dtype_name(t.dtype()), t.str());
  const Tensor src = t.contiguous();
  Tensor out = Tensor::empty(t.shape(), DType::kF32);
  quant::convert_to_f32(t.dtype(), src.raw(), out.data<float>(), t.numel(), pool);
  MappedFile::release(src);  // a tied lm_head and the embedding read them again if shared
  return out;
}

void expect_shape(const Tensor& t, const Shape& shape, const std::string& what) {
  SAMPAN_CHECK(t.defined() && t.shape() == shape, ErrorCode::kInvalidArgument,
               "rotate_llama_weights: {} is {}, expected shape {}", what,
               t.defined() ? t.str() : std::string("undefined"), shape_str(shape));
}

// m·diag(col_scale)·Hb over rows, Hb·diag(row_scale)·m down columns (quant/rotate.h).
void transform_rows(float* m, int64_t rows, int64_t n, const float* col_scale, int64_t block,
                    ThreadPool& pool) {
  quant::hadamard_rows_scaled(m, rows, n, col_scale, block, pool);
}
void transform_columns(float* m, int64_t rows, int64_t cols, const float* row_scale,
                       int64_t block, ThreadPool& pool) {
  quant::hadamard_columns_scaled(m, rows, cols, row_scale, block, pool);
}

// The rotation's parameters, shared by every layer.
struct Rotation {
  int64_t hidden = 0;
  int64_t block = 0;          // residual block (hadamard_block_for(hidden))
  int64_t head_block = 0;     // V/O per-head block (a power of two dividing head_dim)
  int64_t ffn_block = 0;      // down_proj input block
  std::vector<float> signs;   // [hidden] ±1: D of Q = D·Hb
};

// The ±1 signs from the seed. mt19937_64's output sequence is fixed by the standard (unlike
// the std distributions), so a seed means the same rotation on every platform.
std::vector<float> random_signs(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> s(static_cast<size_t>(n));
  for (float& v : s) v = (gen() >> 63) != 0 ? -1.0f : 1.0f;
  return s;
}

// A reader of the residual stream behind an RMSNorm of weight `norm`: W·diag(norm)·Q.
void rotate_reader(Linear& l, const Tensor& norm, const Rotation& rot, const std::string& what,
                   ThreadPool& pool) {
  Tensor w = owned_f32(l.weight, what, pool);
  std::vector<float> scale(rot.signs);
  if (norm.defined()) {
    const float* g = norm.data<float>();
    for (int64_t j = 0; j < rot.hidden; ++j) scale[static_cast<size_t>(j)] *= g[j];
  }
  transform_rows(w.data<float>(), w.dim(0), rot.hidden, scale.data(), rot.block, pool);
  l.weight = w;
}

// A writer into the residual stream (w: its owned f32 weight [hidden, in]): Qᵀ·W and b·Q.
void rotate_writer(Tensor& w, Linear& l, const Rotation& rot, const std::string& what,
                          ThreadPool& pool) {
  transform_columns(w.data<float>(), rot.hidden, w.dim(1), rot.signs.data(), rot.block, pool);
  l.weight = w;
  if (l.bias.defined()) {
    Tensor b = owned_f32(l.bias, what + " bias", pool);
    transform_rows(b.data<float>(), 1, rot.hidden, rot.signs.data(), rot.block, pool);
    l.bias = b;
  }
}

Tensor ones(int64_t n) { return Tensor::from_f32({n}, std::vector<float>(static_cast<size_t>(n), 1.0f)); }

void rotate_layer(const HfConfig& c, LlamaLayerWeights& l, const Rotation& rot,
                  const std::string& p, const std::string& hf, const RotatedLinearFn& done,
                  ThreadPool& pool) {
  auto finished = [&](Linear& lin, const char* name) {
    if (done) done(lin, hf + name);
  };
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  expect_shape(l.attn_norm, {d}, p + "attn_norm");
  expect_shape(l.ffn_norm, {d}, p + "ffn_norm");
  expect_shape(l.attn.q.weight, {c.q_dim(), d}, p + "q_proj");
  expect_shape(l.attn.k.weight, {c.kv_dim(), d}, p + "k_proj");
  expect_shape(l.attn.v.weight, {c.kv_dim(), d}, p + "v_proj");
  expect_shape(l.attn.o.weight, {d, c.q_dim()}, p + "o_proj");
  expect_shape(l.gate.weight, {f, d}, p + "gate_proj");
  expect_shape(l.up.weight, {f, d}, p + "up_proj");
  expect_shape(l.down.weight, {d, f}, p + "down_proj");

  const Tensor attn_norm = l.attn_norm.to_f32(), ffn_norm = l.ffn_norm.to_f32();
  rotate_reader(l.attn.q, attn_norm, rot, p + "q_proj", pool);
  finished(l.attn.q, "self_attn.q_proj");
  rotate_reader(l.attn.k, attn_norm, rot, p + "k_proj", pool);
  finished(l.attn.k, "self_attn.k_proj");
  // V: the per-head H on its output rows (H·W_v, head blocks are contiguous rows), then the
  // residual rotation on its input side.
  rotate_reader(l.attn.v, attn_norm, rot, p + "v_proj", pool);
  transform_columns(l.attn.v.weight.data<float>(), c.kv_dim(), d, nullptr, rot.head_block, pool);
  if (l.attn.v.bias.defined()) {
    Tensor b = owned_f32(l.attn.v.bias, p + "v_proj bias", pool);
    transform_rows(b.data<float>(), 1, c.kv_dim(), nullptr, rot.head_block, pool);
    l.attn.v.bias = b;
  }
  finished(l.attn.v, "self_attn.v_proj");
  // O: W_o·H per query head on its input side (undoes the rotated V), then Qᵀ on its output.
  Tensor o = owned_f32(l.attn.o.weight, p + "o_proj", pool);
  transform_rows(o.data<float>(), d, c.q_dim(), nullptr, rot.head_block, pool);
  rotate_writer(o, l.attn.o, rot, p + "o_proj", pool);
  o = Tensor();  // the linear holds the only reference (done may replace it)
  finished(l.attn.o, "self_attn.o_proj");

  rotate_reader(l.gate, ffn_norm, rot, p + "gate_proj", pool);
  finished(l.gate, "mlp.gate_proj");
  rotate_reader(l.up, ffn_norm, rot, p + "up_proj", pool);
  finished(l.up, "mlp.up_proj");
  // down: W·H_f on its input (the graph applies H_f to the activation), Qᵀ on its output.
  Tensor down = owned_f32(l.down.weight, p + "down_proj", pool);
  transform_rows(down.data<float>(), d, f, nullptr, rot.ffn_block, pool);
  rotate_writer(down, l.down, rot, p + "down_proj", pool);
  down = Tensor();
  finished(l.down, "mlp.down_proj");

  l.attn_norm = ones(d);
  l.ffn_norm = ones(d);
}

}  // namespace

void rotate_llama_weights(const HfConfig& c, LlamaWeights& w, uint64_t seed,
                          const RotatedLinearFn& done, ThreadPool* pool_in) {
  SAMPAN_CHECK(w.down_hadamard_block == 0, ErrorCode::kInvalidArgument,
               "rotate_llama_weights: {}: the weights are already rotated (down_proj Hadamard "
               "block {})",
               c.source, w.down_hadamard_block);
  const int64_t d = c.hidden_size;
  SAMPAN_CHECK(static_cast<int64_t>(w.layers.size()) == c.n_layer, ErrorCode::kInvalidArgument,
               "rotate_llama_weights: {} layers, the config says {}", w.layers.size(), c.n_layer);
  expect_shape(w.tok_embd, {c.vocab_size, d}, "embed_tokens");
  expect_shape(w.output.weight, {c.vocab_size, d}, "lm_head");
  expect_shape(w.output_norm, {d}, "output_norm");
  SAMPAN_CHECK(c.head_dim > 0 && c.intermediate_size > 0, ErrorCode::kInvalidArgument,
               "rotate_llama_weights: head_dim {} and intermediate_size {} must be positive",
               c.head_dim, c.intermediate_size);

  Rotation rot;
  rot.hidden = d;
  rot.block = hadamard_block_for(d);
  rot.head_block = hadamard_block_for(c.head_dim);
  rot.ffn_block = hadamard_block_for(c.intermediate_size);
  rot.signs = random_signs(d, seed);

  std::optional<ThreadPool> own;
  ThreadPool& pool = pool_in != nullptr ? *pool_in : own.emplace(0);
  // lm_head first: when tied it still reads the original embedding table.
  const Tensor output_norm = w.output_norm.to_f32();
  rotate_reader(w.output, output_norm, rot, "lm_head", pool);
  if (done) done(w.output, "lm_head");
  Tensor embd = owned_f32(w.tok_embd, "embed_tokens", pool);
  // The embedding writes the residual stream as rows: E·Q.
  transform_rows(embd.data<float>(), c.vocab_size, d, rot.signs.data(), rot.block, pool);
  w.tok_embd = embd;
  w.output_norm = ones(d);

  for (int64_t i = 0; i < c.n_layer; ++i) {
    rotate_layer(c, w.layers[static_cast<size_t>(i)], rot, "layers." + std::to_string(i) + ".",
                 "model.layers." + std::to_string(i) + ".", done, pool);
  }
  w.down_hadamard_block = rot.ffn_block;
}

}  // namespace sampan::models
