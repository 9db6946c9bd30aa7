// fuse_encoder_attention and fuse_add_layer_norm (encoder_passes.h).
#include "engine/graph/passes/encoder_passes.h"
#include "engine/graph/passes/pattern.h"

#include <cmath>
#include <optional>
#include <set>
#include <vector>

namespace sampan::graph::passes {
namespace {

// The live node producing v, or null (inputs, constants).
const Node* producer(const Graph& g, ValueId v) {
  if (v == kNoValue) return nullptr;
  const Value& val = g.value(v);
  if (val.kind != ValueKind::kIntermediate || val.producer < 0) return nullptr;
  const Node& n = g.node(val.producer);
  return n.dead ? nullptr : &n;
}

NodeId producer_id(const Graph& g, ValueId v) {
  return producer(g, v) ? g.value(v).producer : -1;
}

std::vector<int64_t> ints_attr(const Node& n, const char* name) {
  if (!n.attrs.has(name)) return {};
  try {
    return n.attrs.get_ints(name);
  } catch (...) {
    return {};
  }
}

// ---- reshape targets, read symbolically ----

// One element of a shape vector: a known number, or dim `idx` of value `of`.
struct Sym {
  bool is_dim = false;
  int64_t c = 0;
  ValueId of = kNoValue;
  int64_t idx = 0;
};

std::optional<std::vector<Sym>> eval_shape(const Graph& g, ValueId v, int depth = 0) {
  if (v == kNoValue || depth > 8) return std::nullopt;
  const Value& val = g.value(v);
  if (val.kind == ValueKind::kConstant) {
    const Tensor& t = val.constant;
    if (t.rank() > 1 || t.numel() > 64) return std::nullopt;
    const Tensor c = t.contiguous();
    std::vector<Sym> out;
    for (int64_t i = 0; i < c.numel(); ++i) {
      if (c.dtype() == DType::kI64) {
        out.push_back({false, c.data<int64_t>()[i]});
      } else if (c.dtype() == DType::kI32) {
        out.push_back({false, c.data<int32_t>()[i]});
      } else {
        return std::nullopt;
      }
    }
    return out;
  }
  const Node* n = producer(g, v);
  if (!n || n->outputs.size() != 1) return std::nullopt;
  if (n->op == "identity") return eval_shape(g, n->inputs[0], depth + 1);
  if (n->op == "cast") {
    const std::string to = n->attrs.get_string("to", "");
    if (to != "i64" && to != "i32") return std::nullopt;
    return eval_shape(g, n->inputs[0], depth + 1);
  }
  if (n->op == "concat") {
    const int64_t axis = n->attrs.get_int("axis", 0);
    if (axis != 0 && axis != -1) return std::nullopt;
    std::vector<Sym> out;
    for (ValueId in : n->inputs) {
      auto part = eval_shape(g, in, depth + 1);
      if (!part) return std::nullopt;
      out.insert(out.end(), part->begin(), part->end());
    }
    return out;
  }
  if (n->op == "unsqueeze") {  // a scalar made 1-D
    if (ints_attr(*n, "axes") != std::vector<int64_t>{0}) return std::nullopt;
    auto in = eval_shape(g, n->inputs[0], depth + 1);
    if (!in || in->size() != 1) return std::nullopt;
    return in;
  }
  if (n->op == "gather") {  // one element of a shape vector
    if (n->attrs.get_int("axis", 0) != 0) return std::nullopt;
    auto index = eval_shape(g, n->inputs[1], depth + 1);
    if (!index || index->size() != 1 || (*index)[0].is_dim || (*index)[0].c < 0) {
      return std::nullopt;
    }
    const int64_t i = (*index)[0].c;
    const Node* src = producer(g, n->inputs[0]);
    if (src && src->op == "shape") {
      const int64_t start = src->attrs.get_int("start", 0);
      if (start < 0) return std::nullopt;
      if (src->attrs.has("end")) {
        const int64_t end = src->attrs.get_int("end", 0);
        if (end < 0 || start + i >= end) return std::nullopt;
      }
      return std::vector<Sym>{{true, 0, src->inputs[0], start + i}};
    }
    auto data = eval_shape(g, n->inputs[0], depth + 1);
    if (!data || i >= static_cast<int64_t>(data->size())) return std::nullopt;
    return std::vector<Sym>{(*data)[static_cast<size_t>(i)]};
  }
  return std::nullopt;
}

// The values whose dims 0 and 1 are those of reshape input x [B, S, n]: x itself, and the
// input a of the matmul (with a 2-D constant b) producing it. Also the columns n of x when that
// matmul tells them (-1 otherwise).
struct RowsOf {
  std::set<ValueId> same_rows;
  int64_t cols = -1;
};

RowsOf rows_of(const Graph& g, ValueId x) {
  RowsOf r;
  r.same_rows.insert(x);
  const Node* mm = producer(g, x);
  if (mm && mm->op == "matmul" && mm->inputs.size() >= 2) {
    const Value& b = g.value(mm->inputs[1]);
    if (b.kind == ValueKind::kConstant && b.constant.rank() == 2) {
      r.same_rows.insert(mm->inputs[0]);
      r.cols = mm->attrs.get_int("trans_b", 0) ? b.constant.dim(0) : b.constant.dim(1);
    }
  }
  return r;
}

// Target element `t` at `pos` reproduces the input's dim `pos` (0 with allowzero = 0, or that
// dim of a value with the same rows).
bool copies_dim(const Sym& t, int64_t pos, bool allowzero, const std::set<ValueId>& same) {
  if (!t.is_dim) return t.c == 0 && !allowzero;
  return t.idx == pos && same.count(t.of) != 0;
}

struct Heads {
  int64_t h = 0, d = 0;
};

// reshape(x [B, S, n], target) -> [B, S, H, D]: (H, D), or nullopt when that is not certain.
std::optional<Heads> split_heads(const Graph& g, const Node& reshape, const RowsOf& rows) {
  if (!is_op(reshape, "reshape") || reshape.inputs.size() != 2) return std::nullopt;
  const bool allowzero = reshape.attrs.get_int("allowzero", 0) != 0;
  auto t = eval_shape(g, reshape.inputs[1]);
  if (!t || t->size() != 4) return std::nullopt;
  const Sym &t0 = (*t)[0], &t1 = (*t)[1], &t2 = (*t)[2], &t3 = (*t)[3];
  if (!copies_dim(t0, 0, allowzero, rows.same_rows)) return std::nullopt;
  if (t2.is_dim || t3.is_dim) return std::nullopt;
  const int64_t n = rows.cols;
  if (copies_dim(t1, 1, allowzero, rows.same_rows)) {
    if (t2.c > 0 && t3.c > 0) {
      // No -1: the run checks B·S·H·D = B·S·n itself.
      if (n >= 0 && t2.c * t3.c != n) return std::nullopt;
      return Heads{t2.c, t3.c};
    }
    if (n <= 0) return std::nullopt;
    if (t2.c > 0 && t3.c == -1 && n % t2.c == 0) return Heads{t2.c, n / t2.c};
    if (t2.c == -1 && t3.c > 0 && n % t3.c == 0) return Heads{n / t3.c, t3.c};
    return std::nullopt;
  }
  if (!t1.is_dim && t1.c == -1 && t2.c > 0 && t3.c > 0 && n > 0 && t2.c * t3.c == n) {
    return Heads{t2.c, t3.c};
  }
  return std::nullopt;
}

// reshape(y [B, S, H, Dv], target) -> [B, S, H·Dv].
bool merges_heads(const Graph& g, const Node& reshape, const std::set<ValueId>& same,
                  int64_t hdv) {
  if (!is_op(reshape, "reshape") || reshape.inputs.size() != 2) return false;
  const bool allowzero = reshape.attrs.get_int("allowzero", 0) != 0;
  auto t = eval_shape(g, reshape.inputs[1]);
  if (!t || t->size() != 3) return false;
  const Sym &t0 = (*t)[0], &t1 = (*t)[1], &t2 = (*t)[2];
  if (!copies_dim(t0, 0, allowzero, same)) return false;
  if (copies_dim(t1, 1, allowzero, same)) return !t2.is_dim && (t2.c == -1 || t2.c == hdv);
  return !t1.is_dim && t1.c == -1 && !t2.is_dim && t2.c == hdv;
}

bool is_perm(const Node& n, std::vector<int64_t> perm) {
  return is_op(n, "transpose") && n.inputs.size() == 1 && ints_attr(n, "perm") == perm;
}

// A plain matmul of two computed operands: no bias, no activation, batched (no trans_b).
bool plain_matmul(const Node& n) {
  return is_op(n, "matmul") && (n.inputs.size() == 2 || (n.inputs.size() == 3 && n.inputs[2] == kNoValue)) &&
         n.attrs.get_int("trans_b", 0) == 0 && n.attrs.get_string("activation", "none") == "none";
}

// One side of the attention: value -> (transposes) -> reshape -> source [B, S, H·D].
struct Side {
  ValueId src = kNoValue;  // q, k or v
  Heads heads;
  std::vector<NodeId> nodes;  // the reshape and the transposes, to kill
};

// `v` must be transpose(s) of reshape(src) whose overall permutation of [B, S, H, D] is `perm`,
// each intermediate read only by the next node.
std::optional<Side> match_side(const Graph& g, ValueId v, NodeId reader,
                               const std::vector<int64_t>& perm) {
  Side s;
  std::vector<int64_t> composite = {0, 1, 2, 3};  // out dim i = source dim composite[i]
  ValueId cur = v;
  for (int steps = 0;; ++steps) {
    if (only_consumer(g, cur) != reader) return std::nullopt;
    const NodeId id = producer_id(g, cur);
    if (id < 0) return std::nullopt;
    const Node& n = g.node(id);
    if (n.op == "transpose" && steps < 2) {
      const std::vector<int64_t> p = ints_attr(n, "perm");
      if (p.size() != 4 || n.inputs.size() != 1) return std::nullopt;
      std::vector<int64_t> c(4);
      for (size_t i = 0; i < 4; ++i) {
        if (p[i] < 0 || p[i] > 3) return std::nullopt;
        c[i] = p[static_cast<size_t>(composite[i])];
      }
      composite = c;
      s.nodes.push_back(id);
      reader = id;
      cur = n.inputs[0];
      continue;
    }
    if (n.op != "reshape" || composite != perm) return std::nullopt;
    auto heads = split_heads(g, n, rows_of(g, n.inputs[0]));
    if (!heads) return std::nullopt;
    s.heads = *heads;
    s.src = n.inputs[0];
    s.nodes.push_back(id);
    return s;
  }
}

// scores = matmul(q4, k4) [· c | / c]: the matmul and the scale, or nullopt.
struct Scores {
  NodeId matmul = -1;
  NodeId scale_node = -1;
  double scale = 1.0;
};

std::optional<Scores> match_scores(const Graph& g, ValueId v, NodeId reader) {
  if (only_consumer(g, v) != reader) return std::nullopt;
  NodeId id = producer_id(g, v);
  if (id < 0) return std::nullopt;
  Scores s;
  const Node& n = g.node(id);
  if (is_op(n, "binary", "mul") || is_op(n, "binary", "div")) {
    const bool div = n.attrs.get_string("kind", "") == "div";
    ValueId x = kNoValue;
    double c = NAN;
    if (!std::isnan(scalar_constant(g, n.inputs[1]))) {
      x = n.inputs[0];
      c = scalar_constant(g, n.inputs[1]);
    } else if (!div && !std::isnan(scalar_constant(g, n.inputs[0]))) {
      x = n.inputs[1];
      c = scalar_constant(g, n.inputs[0]);
    }
    if (x == kNoValue || !std::isfinite(c) || c == 0.0) return std::nullopt;
    if (only_consumer(g, x) != id) return std::nullopt;
    s.scale_node = id;
    s.scale = div ? 1.0 / c : c;
    id = producer_id(g, x);
    if (id < 0) return std::nullopt;
  }
  const Node& mm = g.node(id);
  if (!plain_matmul(mm)) return std::nullopt;
  s.matmul = id;
  s.scale *= mm.attrs.get_float("alpha", 1.0);
  return s;
}

}  // namespace

int fuse_encoder_attention(Graph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const NodeId sm_id = static_cast<NodeId>(i);
    const Node& sm = g.nodes()[i];
    if (!is_op(sm, "softmax")) continue;
    const int64_t axis = sm.attrs.get_int("axis", -1);
    if (axis != -1 && axis != 3) continue;
    // [+ mask]
    ValueId mask = kNoValue;
    std::optional<Scores> sc;
    NodeId add_id = -1;
    if (only_consumer(g, sm.inputs[0]) != sm_id) continue;
    const NodeId before = producer_id(g, sm.inputs[0]);
    if (before >= 0 && is_op(g.node(before), "binary", "add")) {
      const Node& add = g.node(before);
      for (int side = 0; side < 2 && !sc; ++side) {
        const ValueId s = add.inputs[static_cast<size_t>(side)];
        const ValueId m = add.inputs[static_cast<size_t>(1 - side)];
        if (s == m) continue;
        sc = match_scores(g, s, before);
        if (sc) mask = m;
      }
      add_id = before;
    } else {
      sc = match_scores(g, sm.inputs[0], sm_id);
    }
    if (!sc) continue;
    const Node& qk = g.node(sc->matmul);
    auto q = match_side(g, qk.inputs[0], sc->matmul, {0, 2, 1, 3});
    auto k = match_side(g, qk.inputs[1], sc->matmul, {0, 2, 3, 1});
    if (!q || !k || q->heads.h != k->heads.h || q->heads.d != k->heads.d) continue;
    // p · v4 -> transpose -> reshape
    const NodeId pv_id = only_consumer(g, sm.outputs[0]);
    if (pv_id < 0) continue;
    const Node& pv = g.node(pv_id);
    if (!plain_matmul(pv) || pv.inputs[0] != sm.outputs[0] || pv.attrs.get_float("alpha", 1.0) != 1.0) continue;
    auto v = match_side(g, pv.inputs[1], pv_id, {0, 2, 1, 3});
    if (!v || v->heads.h != q->heads.h) continue;
    const NodeId back_id = only_consumer(g, pv.outputs[0]);
    if (back_id < 0 || !is_perm(g.node(back_id), {0, 2, 1, 3})) continue;
    const NodeId out_id = only_consumer(g, g.node(back_id).outputs[0]);
    if (out_id < 0) continue;
    std::set<ValueId> same = rows_of(g, q->src).same_rows;
    same.insert(g.node(out_id).inputs[0]);
    if (!merges_heads(g, g.node(out_id), same, v->heads.h * v->heads.d)) continue;
    if (g.node(out_id).inputs[0] != g.node(back_id).outputs[0]) continue;

    // Rewrite the final reshape into the fused node (it keeps its output value and place: every
    // input of the new node is computed before it).
    Node fused;
    fused.op = "attention_nc";
    fused.name = g.node(out_id).name;
    fused.inputs = {q->src, k->src, v->src};
    if (mask != kNoValue) fused.inputs.push_back(mask);
    fused.outputs = g.node(out_id).outputs;
    fused.attrs = Attributes{{"n_heads", q->heads.h}, {"scale", sc->scale}};
    std::vector<NodeId> kill = {sm_id, sc->matmul, pv_id, back_id};
    if (sc->scale_node >= 0) kill.push_back(sc->scale_node);
    if (add_id >= 0) kill.push_back(add_id);
    for (const Side* s : {&*q, &*k, &*v}) kill.insert(kill.end(), s->nodes.begin(), s->nodes.end());
    g.mutable_node(out_id) = fused;
    for (NodeId id : kill) g.mutable_node(id).dead = true;
    ++rewrites;
  }
  return rewrites;
}

int fuse_add_layer_norm(Graph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& add = g.nodes()[i];
    if (!is_op(add, "binary", "add") || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    bool computed = true;
    for (ValueId in : add.inputs) computed &= g.value(in).kind != ValueKind::kConstant;
    if (!computed) continue;
    const NodeId ln_id = only_consumer(g, add.outputs[0]);
    if (ln_id < 0) continue;
    const Node& ln = g.node(ln_id);
    if (!is_op(ln, "layer_norm") || ln.inputs.empty() || ln.inputs[0] != add.outputs[0] ||
        ln.attrs.get_int("axis", -1) != -1) {
      continue;
    }
    Node fused;
    fused.op = "add_layer_norm";
    fused.name = ln.name;
    fused.inputs = add.inputs;
    for (size_t j = 1; j < 3; ++j) fused.inputs.push_back(j < ln.inputs.size() ? ln.inputs[j] : kNoValue);
    while (fused.inputs.back() == kNoValue) fused.inputs.pop_back();
    fused.outputs = ln.outputs;
    fused.attrs = Attributes{{"eps", ln.attrs.get_float("eps", 1e-5)}};
    g.mutable_node(ln_id) = fused;
    g.mutable_nodes()[i].dead = true;
    ++rewrites;
  }
  return rewrites;
}

}  // namespace sampan::graph::passes
