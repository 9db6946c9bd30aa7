// choose_conv_layout (layout_passes.h).
#include "engine/graph/passes/layout_passes.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "engine/ops/conv2d_nchwc.h"
#include "engine/ops/conv2d_winograd.h"

namespace sampan::graph::passes {
namespace {

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// Padding c channels to a block multiple wastes at most a quarter of the work.
bool pads_well(int64_t c, int64_t block) { return round_up(c, block) * 4 <= c * 5; }

// A constant tensor of `dtype` on the CPU of the given rank, or null.
const Tensor* cpu_constant(const Graph& g, ValueId v, size_t rank, DType dtype) {
  if (v == kNoValue) return nullptr;
  const Value& val = g.value(v);
  if (val.kind != ValueKind::kConstant || val.constant.dtype() != dtype ||
      val.constant.device().type != DeviceType::kCPU || val.constant.shape().size() != rank) {
    return nullptr;
  }
  return &val.constant;
}

const Tensor* f32_constant(const Graph& g, ValueId v, size_t rank) {
  return cpu_constant(g, v, rank, DType::kF32);
}

ValueId input_or_none(const Node& n, size_t i) {
  return n.inputs.size() > i ? n.inputs[i] : kNoValue;
}

bool is_bf16(const Node& n) {
  const auto& all = n.attrs.all();
  const auto it = all.find("precision");
  if (it == all.end()) return false;
  const std::string* s = std::get_if<std::string>(&it->second);
  return s && *s == "bf16";
}

// A conv2d the blocked kernel can run, ignoring where its input comes from. bf16 convs (their
// weight already rounded by convert_precision_bf16) only where the bf16 tile is the fast one
// (cpu::nchwc_bf16_runs); elsewhere they keep conv2d_bf16's GEMM (AMX tiles, or vdpbf16ps at
// half the FMA rate).
bool conv_fits(const Graph& g, const Node& n, int64_t block) {
  if (n.dead || n.op != "conv2d" || n.outputs.size() != 1 || n.inputs.size() < 2) return false;
  if (n.attrs.get_int("group", 1) != 1) return false;
  const bool bf16 = is_bf16(n);
  if (bf16 && (block != 16 || !ops::nchwc_bf16_runs())) return false;
  const Tensor* w = cpu_constant(g, n.inputs[1], 4, bf16 ? DType::kBF16 : DType::kF32);
  if (!w) return false;
  const ValueId b = input_or_none(n, 2);
  if (b != kNoValue) {
    const Tensor* bt = f32_constant(g, b, 1);
    if (!bt || bt->dim(0) != w->dim(0)) return false;
  }
  return pads_well(w->dim(0), block);
}

// Integer list attribute `name`, or `fallback` when absent.
std::vector<int64_t> ints_or(const Node& n, const char* name, std::vector<int64_t> fallback) {
  return n.attrs.has(name) ? n.attrs.get_ints(name) : fallback;
}

// Fewest input and output channels for which a blocked 3x3 stride-1 conv goes to
// conv2d_winograd: the transforms cost per channel what the GEMMs save per channel pair, so
// few channels save little. Measured (bench_conv, 1-2 threads, AVX2 block 8, a shared 2-vCPU
// Zen 4 VM, interleaved rounds), Winograd over the direct tile on ResNet-50's 3x3 stride-1
// shapes: batch 1 64ch@56 3.5-5.8x, 128@28 1.7-5.1x, 256@14 1.7-2.5x, 512@7 1.3-1.6x; batch 8
// 2.5-3.0x, 3.1-3.5x, 2.2-3.1x, 2.3-4.1x; 16ch@56 1.2-1.3x; 8 channels 0.75-2x (noise-level:
// left direct).
constexpr int64_t kWinogradMinChannels = 16;

// Both blocks' Winograd kernels have been measured against the direct tile on whole models:
// block 8 (AVX2, Zen 3/4, numbers above) and block 16 (AVX-512, a 2-core Sapphire Rapids VM,
// ResNet-50 at 2 threads, interleaved runs): batch 8 1.13-1.20x, batch 1 0.96-1.06x (noise
// level: in the model, the 14x14 and 7x7 layers' transformed weights, 4x the direct ones, come
// from L3 for 16 and 4 tiles per image, which eats the arithmetic saved; the 56x56 and 28x28
// layers gain 2-2.5x). SAMPAN_CONV_WINOGRAD=0 keeps the direct tile everywhere.

// A blocked conv (input not plain) that conv2d_winograd runs: 3x3, stride 1, dilation 1.
bool winograd_fits(const Node& n, const Tensor& w, int64_t block) {
  const char* env = std::getenv("SAMPAN_CONV_WINOGRAD");
  const std::string want = env ? env : "";
  if (want == "0") return false;
  const std::vector<int64_t> ones = {1, 1};
  return w.dim(2) == 3 && w.dim(3) == 3 && w.dim(0) >= kWinogradMinChannels &&
         w.dim(1) >= kWinogradMinChannels && ints_or(n, "strides", ones) == ones &&
         ints_or(n, "dilations", ones) == ones && ops::winograd_runs(block);
}

bool pool_fits(const Node& n) {
  return !n.dead && n.op == "pool2d" && n.inputs.size() == 1 && n.outputs.size() == 1;
}

// How reorder_weight lays a block's inputs out: one per element (f32), or bf16 in the pairs one
// vdpbf16ps multiplies: two input channels (blocked input), or two kernel columns (plain input,
// the stem; an odd kernel gets a zero column, which one more column of right padding makes the
// same conv).
enum class Pairs { kNone, kChannels, kColumns };

// Moves w [O, C, kh, kw] into dst (zeroed) in the kernel's order, with kw2 kernel columns.
template <typename T>
void scatter_weight(const T* src, T* dst, int64_t o, int64_t c, int64_t kh, int64_t kw,
                    int64_t kw2, int64_t cb, int64_t b_in, int64_t block, Pairs pairs) {
  for (int64_t oc = 0; oc < o; ++oc) {
    for (int64_t ic = 0; ic < c; ++ic) {
      for (int64_t ky = 0; ky < kh; ++ky) {
        for (int64_t kx = 0; kx < kw; ++kx) {
          const int64_t taps = ((oc / block) * cb + ic / b_in) * kh + ky;  // [O/B, cb, kh]
          // Outer index u, then the axis paired (a, of p) over the block's outputs.
          const bool columns = pairs == Pairs::kColumns;
          const int64_t u = columns ? taps : taps * kw2 + kx;
          const int64_t a = columns ? kx : ic % b_in, p = columns ? kw2 : b_in;
          const int64_t d = pairs == Pairs::kNone
                                ? (u * p + a) * block + oc % block
                                : ((u * (p / 2) + a / 2) * block + oc % block) * 2 + a % 2;
          dst[d] = src[((oc * c + ic) * kh + ky) * kw + kx];
        }
      }
    }
  }
}

// conv2d's w [O, C, kh, kw] -> [O/B, C/B, kh, kw, B, B] (blocked input, b_in = B) or
// [O/B, C, kh, kw, 1, B] (plain input, b_in = 1), zero for padded channels; bf16 in pairs:
// [O/B, C/B, kh, kw, B/2, B, 2] (kChannels) or [O/B, C, kh, ceil(kw / 2), 1, B, 2] (kColumns).
// The values are moved, not rounded: w is f32 (kNone) or bf16 (pairs).
Tensor reorder_weight(const Tensor& w, int64_t block, int64_t b_in, Pairs pairs = Pairs::kNone) {
  const Tensor wc = w.contiguous();
  const int64_t o = w.dim(0), c = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  const int64_t ob = round_up(o, block) / block;
  const int64_t cb = b_in == 1 ? c : round_up(c, block) / block;
  const int64_t kw2 = pairs == Pairs::kColumns ? round_up(kw, 2) : kw;
  const Shape shape = pairs == Pairs::kNone       ? Shape{ob, cb, kh, kw, b_in, block}
                      : pairs == Pairs::kChannels ? Shape{ob, cb, kh, kw, block / 2, block, 2}
                                                  : Shape{ob, cb, kh, kw2 / 2, 1, block, 2};
  Tensor out = Tensor::empty(shape, wc.dtype());
  std::memset(out.raw(), 0, static_cast<size_t>(out.nbytes()));
  if (pairs == Pairs::kNone) {
    scatter_weight(wc.data<float>(), out.data<float>(), o, c, kh, kw, kw2, cb, b_in, block, pairs);
  } else {
    scatter_weight(wc.data<uint16_t>(), out.data<uint16_t>(), o, c, kh, kw, kw2, cb, b_in, block,
                   pairs);
  }
  return out;
}

Tensor pad_bias(const Tensor& b, int64_t block) {
  const Tensor bc = b.contiguous();
  std::vector<float> dst(static_cast<size_t>(round_up(b.dim(0), block)), 0.0f);
  for (int64_t i = 0; i < b.dim(0); ++i) dst[static_cast<size_t>(i)] = bc.data<float>()[i];
  return Tensor::from_f32({static_cast<int64_t>(dst.size())}, dst);
}

class LayoutRewriter {
 public:
  LayoutRewriter(Graph& g, int64_t block) : g_(g), block_(block) {}

  int run() {
    int rewrites = 0;
    for (NodeId i = 0; i < static_cast<NodeId>(g_.nodes().size()); ++i) {
      const Node& n = g_.node(i);
      if (conv_fits(g_, n, block_) && conv_joins(n)) {
        i = rewrite_conv(i);
        ++rewrites;
      } else if (pool_fits(n) && blocked_.count(n.inputs[0])) {
        i = rewrite_pool(i);
        ++rewrites;
      }
    }
    return rewrites;
  }

 private:
  // Whether a fitting conv joins the region (layout_passes.h): a stem, a blocked input, or a
  // reader that can take its output blocked.
  bool conv_joins(const Node& n) const {
    const int64_t c = g_.value(n.inputs[1]).constant.dim(1);
    if (c < block_ || blocked_.count(n.inputs[0])) return true;
    if (!pads_well(c, block_)) return false;
    for (NodeId r : g_.consumers(n.outputs[0])) {
      const Node& rn = g_.node(r);
      if (pool_fits(rn) || (conv_fits(g_, rn, block_) && rn.inputs[0] == n.outputs[0])) {
        return true;
      }
    }
    return false;
  }

  // The blocked twin of NCHW value v of c channels, inserting a reorder_nchwc before node `at`
  // the first time; *at moves past the inserted node.
  ValueId blocked_input(ValueId v, int64_t c, NodeId* at) {
    const auto it = blocked_.find(v);
    if (it != blocked_.end()) return it->second;
    Node r;
    r.op = "reorder_nchwc";
    r.name = g_.value(v).name + ".to_nchwc";
    r.inputs = {v};
    r.attrs.set("block", block_);
    const NodeId id = g_.insert_node_before(*at, std::move(r), 1);
    ++*at;
    const ValueId vb = g_.node(id).outputs[0];
    blocked_[v] = vb;
    channels_[v] = c;
    return vb;
  }

  // Puts `blocked` (a node computing the blocked twin of old node *at's output, of c channels)
  // before the old node and turns the old node into the reorder_nchw that still produces its
  // original output for readers outside the region (compact() drops it when there are none).
  // Returns the old node's new id.
  NodeId replace(NodeId at, Node blocked, int64_t c) {
    const ValueId out = g_.node(at).outputs[0];
    const NodeId id = g_.insert_node_before(at, std::move(blocked), 1);
    const ValueId vb = g_.node(id).outputs[0];
    Node& old = g_.mutable_node(at + 1);
    old.op = "reorder_nchw";
    old.inputs = {vb};
    old.attrs = Attributes{};
    old.attrs.set("channels", c);
    blocked_[out] = vb;
    channels_[out] = c;
    return at + 1;
  }

  NodeId rewrite_conv(NodeId at) {
    const Node n = g_.node(at);
    // A handle, not a reference: inserting nodes and constants below grows the value table.
    const Tensor w = g_.value(n.inputs[1]).constant;
    const int64_t o = w.dim(0), c = w.dim(1);
    const bool plain = c < block_ && !blocked_.count(n.inputs[0]);
    // A bf16 stem reads the plain input: the bf16 tile takes it in pairs of kernel columns (an
    // odd kernel gets a zero column and one more column of right padding: the same outputs);
    // dilated along w, it runs the f32 tile on its bf16 weights widened back (exact) instead.
    const bool bf16_w = w.dtype() == DType::kBF16;
    const std::vector<int64_t> ones = {1, 1};
    const bool column_pairs = bf16_w && plain && ints_or(n, "dilations", ones)[1] == 1;
    const bool bf16 = bf16_w && (!plain || column_pairs);
    const bool winograd = !plain && !bf16 && winograd_fits(n, w, block_);
    Node b;
    b.op = winograd ? "conv2d_winograd" : "conv2d_nchwc";
    b.name = n.name + (winograd ? ".winograd" : ".nchwc");
    b.attrs = n.attrs;
    b.inputs.resize(4, kNoValue);
    b.inputs[0] = plain ? n.inputs[0] : blocked_input(n.inputs[0], c, &at);
    const Tensor wb = winograd       ? ops::winograd_weight(w, block_)
                      : column_pairs ? reorder_weight(w, block_, 1, Pairs::kColumns)
                      : bf16         ? reorder_weight(w, block_, block_, Pairs::kChannels)
                      : bf16_w       ? reorder_weight(w.to_f32(), block_, 1)
                                     : reorder_weight(w, block_, plain ? 1 : block_);
    if (column_pairs && w.dim(3) % 2 != 0) {
      std::vector<int64_t> pads = ints_or(n, "pads", {0, 0, 0, 0});
      pads[3] += 1;  // top, left, bottom, right: the added zero column's input
      b.attrs.set("pads", pads);
    }
    b.inputs[1] = g_.add_constant(n.name + (winograd ? ".w_winograd" : ".w_nchwc"), wb);
    const ValueId bias = input_or_none(n, 2);
    if (bias != kNoValue) {
      b.inputs[2] = g_.add_constant(n.name + ".b_nchwc", pad_bias(g_.value(bias).constant, block_));
    }
    const ValueId res = input_or_none(n, 3);
    if (res != kNoValue) b.inputs[3] = blocked_input(res, o, &at);
    while (!b.inputs.empty() && b.inputs.back() == kNoValue) b.inputs.pop_back();
    return replace(at, std::move(b), o);
  }

  NodeId rewrite_pool(NodeId at) {
    const Node n = g_.node(at);
    const ValueId xb = blocked_.at(n.inputs[0]);
    Node b;
    b.op = "pool2d_nchwc";
    b.name = n.name + ".nchwc";
    b.attrs = n.attrs;
    b.inputs = {xb};
    return replace(at, std::move(b), channels_.at(n.inputs[0]));
  }

  Graph& g_;
  int64_t block_;
  std::map<ValueId, ValueId> blocked_;  // NCHW value -> its blocked twin
  std::map<ValueId, int64_t> channels_;  // NCHW value with a twin -> its channels
};

}  // namespace

int choose_conv_layout(Graph& graph) {
  const char* env = std::getenv("SAMPAN_CONV_LAYOUT");
  if (env && std::string(env) == "nchw") return 0;
  return LayoutRewriter(graph, ops::nchwc_block()).run();
}

}  // namespace sampan::graph::passes
