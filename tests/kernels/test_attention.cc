// kv_cache_write and attention (GQA, causal by position, sliding window) on one sequence whose
// cache is a single contiguous block (the CausalLm layout), against a plain double-precision
// softmax reference, plus chunked prefill/decode against one shot. The paged, multi-sequence
// cases are in test_paged_attention.cc.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/attention_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

AttentionShape make_shape(int64_t heads, int64_t kv, int64_t hd, int64_t window) {
  AttentionShape s;
  s.n_heads = heads;
  s.n_kv_heads = kv;
  s.head_dim = hd;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  s.sliding_window = window;
  return s;
}

// One sequence, one block of `capacity` rows: block_tables = [[0]].
PagedKvCache one_block(std::vector<float>& kc, std::vector<float>& vc, int64_t capacity) {
  static const int32_t kTable[1] = {0};
  PagedKvCache c;
  c.k = kc.data();
  c.v = vc.data();
  c.n_blocks = 1;
  c.block_size = capacity;
  c.block_tables = kTable;
  c.n_seqs = 1;
  c.max_blocks = 1;
  return c;
}

// out[t, h] = sum_j softmax_j(scale q_h . k_j) v_j over cache rows j in [lo(t), pos[t]], in
// double. kc, vc: [capacity, n_kv * hd].
std::vector<double> reference(const AttentionShape& s, int64_t n_tokens, const float* q,
                              int64_t ldq, const std::vector<float>& kc,
                              const std::vector<float>& vc, const std::vector<int32_t>& pos) {
  const int64_t hd = s.head_dim, kvw = s.n_kv_heads * hd, group = s.n_heads / s.n_kv_heads;
  std::vector<double> out(size_t(n_tokens * s.n_heads * hd));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t p = pos[size_t(t)];
    const int64_t lo = s.sliding_window > 0 ? std::max<int64_t>(0, p - s.sliding_window + 1) : 0;
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> score;
      for (int64_t j = lo; j <= p; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) {
          d += double(q[t * ldq + h * hd + i]) * kc[size_t(j * kvw + kvh * hd + i)];
        }
        score.push_back(d * s.scale);
      }
      const double mx = *std::max_element(score.begin(), score.end());
      double z = 0;
      for (double& x : score) z += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int64_t j = lo; j <= p; ++j) {
          acc += score[size_t(j - lo)] * vc[size_t(j * kvw + kvh * hd + i)];
        }
        out[size_t(t * s.n_heads * hd + h * hd + i)] = acc / z;
      }
    }
  }
  return out;
}

// Each output is a convex combination of V rows (|v| <= 1 here). Its error comes from the f32
// logits (an f32 dot product of head_dim terms, relative error ~1e-7 of the sum of |q_i k_i|,
// which the large-logit case pushes towards 60) moving the weights, plus the f32 exp (2 ulp)
// and the f32 accumulation. Measured worst: 1.6e-7 with unit-scale logits, 1.1e-6 with the large
// ones. 5e-6 keeps a margin and is far below what a wrong mask, scale or head mapping gives
// (~1e-1).
constexpr double kTol = 5e-6;

int64_t count_bad(const std::vector<double>& want, const float* out, int64_t ldo, int64_t n_tokens,
                  int64_t width) {
  int64_t bad = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      const double e = std::fabs(out[t * ldo + i] - want[size_t(t * width + i)]);
      if (!(e <= kTol)) {
        if (bad++ == 0) {
          UNSCOPED_INFO("token " << t << " col " << i << ": " << out[t * ldo + i] << " want "
                                 << want[size_t(t * width + i)]);
        }
      }
    }
  }
  return bad;
}

int64_t count_diff(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] != b[i];
  return n;
}

struct Scenario {
  const char* name;
  std::vector<int32_t> pos;  // positions of the new tokens
};

TEST_CASE("attention matches the double reference", "[kernels][attention]") {
  const std::vector<Scenario> scenarios = {
      {"prefill after a prefix",
       [] {
         std::vector<int32_t> p;
         for (int32_t i = 30; i < 100; ++i) p.push_back(i);  // 70 tokens, crosses a key block
         return p;
       }()},
      {"decode", {1000}},
      {"scattered positions", {3, 10, 11, 64, 200, 1, 700}},
      {"batch of short and long", {0, 900, 2, 513}},
  };
  struct Config {
    int64_t heads, kv, hd;
  };
  const std::vector<Config> configs = {
      {32, 4, 64}, {12, 4, 128}, {4, 4, 80}, {8, 1, 64}, {6, 2, 7}};
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  Runners runners;
  IsaRestore restore;
  for (const Config& cfg : configs) {
    for (int64_t window : {0, 1, 5, 100}) {
      for (const Scenario& sc : scenarios) {
        for (float q_amp : {1.0f, 8.0f}) {  // 8: logits up to ~±60, a peaked softmax
          const AttentionShape s = make_shape(cfg.heads, cfg.kv, cfg.hd, window);
          const int64_t n = static_cast<int64_t>(sc.pos.size());
          const int64_t qw = s.n_heads * s.head_dim, kvw = s.n_kv_heads * s.head_dim;
          const int64_t capacity = *std::max_element(sc.pos.begin(), sc.pos.end()) + 3;
          // A fused [q | k | v | pad] row, as a QKV projection writes it.
          const int64_t ld_in = qw + 2 * kvw + 7;
          std::vector<float> qkv(size_t((n - 1) * ld_in + qw + 2 * kvw));
          for (float& x : qkv) x = unit(rng);
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t i = 0; i < qw; ++i) qkv[size_t(t * ld_in + i)] *= q_amp;
          }
          const float* q = qkv.data();
          const float* k = q + qw;
          const float* v = k + kvw;
          // The cache starts with an earlier context everywhere; the new rows replace theirs.
          std::vector<float> kc0(size_t(capacity * kvw)), vc0(kc0.size());
          for (float& x : kc0) x = unit(rng);
          for (float& x : vc0) x = unit(rng);
          std::vector<float> kc_want = kc0, vc_want = vc0;
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t i = 0; i < kvw; ++i) {
              kc_want[size_t(sc.pos[size_t(t)] * kvw + i)] = k[t * ld_in + i];
              vc_want[size_t(sc.pos[size_t(t)] * kvw + i)] = v[t * ld_in + i];
            }
          }
          const std::vector<double> want = reference(s, n, q, ld_in, kc_want, vc_want, sc.pos);
          for (Isa isa : supported_isas()) {
            REQUIRE(set_isa(isa));
            for (auto [rname, runner] : runners.all()) {
              INFO("heads " << cfg.heads << "/" << cfg.kv << " hd " << cfg.hd << " window "
                            << window << " " << sc.name << " q_amp " << q_amp << " isa "
                            << isa_name(isa) << " runner " << rname);
              std::vector<float> kc = kc0, vc = vc0;
              const PagedKvCache cache = one_block(kc, vc, capacity);
              const std::vector<int32_t> seq(size_t(n), 0);
              kv_cache_write(n, s, k, ld_in, v, ld_in, sc.pos.data(), seq.data(), cache);
              CHECK(count_diff(kc, kc_want) == 0);
              CHECK(count_diff(vc, vc_want) == 0);
              const int64_t ldo = qw + 5;
              std::vector<float> out(size_t((n - 1) * ldo + qw));
              attention(n, s, q, ld_in, cache, sc.pos.data(), seq.data(), out.data(), ldo,
                        *runner);
              CHECK(count_bad(want, out.data(), ldo, n, qw) == 0);
            }
          }
        }
      }
    }
  }
}

// Prefill in chunks and then decode, writing each chunk's K/V before attending, must give what
// one call over the whole sequence gives.
TEST_CASE("attention in chunks equals one shot", "[kernels][attention]") {
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  Runners runners;
  IsaRestore restore;
  const std::vector<int64_t> chunks = {1, 63, 64, 2, 17, 1, 1, 1};  // 150 tokens
  for (auto [heads, kv, hd] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{32, 4, 64}, {12, 4, 128}, {8, 1, 80}}) {
    for (int64_t window : {0, 40}) {
      const AttentionShape s = make_shape(heads, kv, hd, window);
      const int64_t qw = heads * hd, kvw = kv * hd;
      const int64_t len = 150, start = 11;  // positions 11 .. 160
      const int64_t capacity = start + len;
      std::vector<float> q(size_t(len * qw)), k(size_t(len * kvw)), v(size_t(len * kvw));
      for (auto* buf : {&q, &k, &v}) {
        for (float& x : *buf) x = unit(rng);
      }
      std::vector<int32_t> pos(static_cast<size_t>(len));
      const std::vector<int32_t> seq(static_cast<size_t>(len), 0);
      for (int64_t t = 0; t < len; ++t) pos[size_t(t)] = static_cast<int32_t>(start + t);
      // The rows before `start` hold a prefix (written by an earlier request).
      std::vector<float> prefix_k(size_t(capacity * kvw)), prefix_v(prefix_k.size());
      for (float& x : prefix_k) x = unit(rng);
      for (float& x : prefix_v) x = unit(rng);
      for (Isa isa : supported_isas()) {
        REQUIRE(set_isa(isa));
        for (auto [rname, runner] : runners.all()) {
          INFO("heads " << heads << "/" << kv << " hd " << hd << " window " << window << " isa "
                        << isa_name(isa) << " runner " << rname);
          std::vector<float> kc1 = prefix_k, vc1 = prefix_v, out1(size_t(len * qw));
          const PagedKvCache c1 = one_block(kc1, vc1, capacity);
          kv_cache_write(len, s, k.data(), kvw, v.data(), kvw, pos.data(), seq.data(), c1);
          attention(len, s, q.data(), qw, c1, pos.data(), seq.data(), out1.data(), qw, *runner);

          std::vector<float> kc2 = prefix_k, vc2 = prefix_v, out2(size_t(len * qw));
          const PagedKvCache c2 = one_block(kc2, vc2, capacity);
          int64_t t0 = 0;
          for (int64_t c : chunks) {
            kv_cache_write(c, s, k.data() + t0 * kvw, kvw, v.data() + t0 * kvw, kvw,
                           pos.data() + t0, seq.data(), c2);
            attention(c, s, q.data() + t0 * qw, qw, c2, pos.data() + t0, seq.data(),
                      out2.data() + t0 * qw, qw, *runner);
            t0 += c;
          }
          REQUIRE(t0 == len);
          CHECK(count_diff(kc1, kc2) == 0);
          // The one shot is one run, all through the prefill kernel. A token of a chunk at
          // least attention_prefill_min_tokens long takes that kernel in both, whose result
          // does not depend on the chunking: the same bits. The other chunks' tokens take the
          // per-token loop, a different summation order (and split-K merges with a wide
          // runner), so allow their rounding: 1e-6 absolute on values bounded by 1.
          const int64_t min_run = attention_prefill_min_tokens(s);
          double diff_same = 0, diff_other = 0;
          int64_t n_same = 0;
          t0 = 0;
          for (int64_t c : chunks) {
            const bool same = c >= min_run && len >= min_run;
            n_same += same ? c : 0;
            for (int64_t i = t0 * qw; i < (t0 + c) * qw; ++i) {
              double& diff = same ? diff_same : diff_other;
              diff = std::max(diff, double(std::fabs(out1[size_t(i)] - out2[size_t(i)])));
            }
            t0 += c;
          }
          CHECK(n_same >= 63 + 64);  // the two long chunks at least
          CHECK(diff_same == 0.0);
          CHECK(diff_other <= 1e-6);
          // And both are right.
          const std::vector<double> want = reference(s, len, q.data(), qw, kc1, vc1, pos);
          CHECK(count_bad(want, out2.data(), qw, len, qw) == 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
