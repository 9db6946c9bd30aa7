// The paged, multi-sequence attention: several sequences of different lengths in one call (prefill
// chunks mixed with decode tokens, in shuffled batch order), their K/V in shuffled
// non-contiguous blocks of a shared pool, against a plain double reference over each sequence's
// logical K/V. Then the op's index checks through a one-node graph.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/graph/executor.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
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

// A sequence of the batch: positions [0, past) are cached from earlier calls, positions
// [past, past + n_new) come with this call.
struct SeqSpec {
  int64_t past;
  int64_t n_new;
};

struct Scenario {
  const char* name;
  std::vector<SeqSpec> seqs;
};

// Every sequence's K and V in logical order, [len, kv_width] each, plus the new tokens.
struct Batch {
  std::vector<std::vector<float>> k, v;  // per sequence [past + n_new, kvw]
  std::vector<int32_t> seq, pos;         // [n_tokens], in (shuffled) batch order
  std::vector<float> qkv;                // [n_tokens, ld_in]: q | k | v | pad per row
  int64_t ld_in = 0;
};

// shuffle: the new tokens in random batch order; else each sequence's together, by position
// (the engine's layout, whose prefill chunks take attention's prefill kernel).
Batch make_batch(const Scenario& sc, const AttentionShape& s, std::mt19937& rng,
                 bool shuffle = true) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const int64_t qw = s.n_heads * s.head_dim, kvw = s.n_kv_heads * s.head_dim;
  Batch b;
  b.ld_in = qw + 2 * kvw + 3;
  for (size_t i = 0; i < sc.seqs.size(); ++i) {
    const int64_t len = sc.seqs[i].past + sc.seqs[i].n_new;
    b.k.emplace_back(size_t(len * kvw));
    b.v.emplace_back(size_t(len * kvw));
    for (float& x : b.k.back()) x = unit(rng);
    for (float& x : b.v.back()) x = unit(rng);
    for (int64_t p = sc.seqs[i].past; p < len; ++p) {
      b.seq.push_back(static_cast<int32_t>(i));
      b.pos.push_back(static_cast<int32_t>(p));
    }
  }
  // The batch order must not matter: every K/V is written before any token attends.
  std::vector<size_t> order(b.seq.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffle) std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> seq, pos;
  for (size_t i : order) {
    seq.push_back(b.seq[i]);
    pos.push_back(b.pos[i]);
  }
  b.seq = seq;
  b.pos = pos;
  const int64_t n = static_cast<int64_t>(b.seq.size());
  b.qkv.assign(size_t(n * b.ld_in), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    float* row = b.qkv.data() + t * b.ld_in;
    for (int64_t i = 0; i < qw; ++i) row[i] = unit(rng);
    const std::vector<float>& k = b.k[size_t(b.seq[size_t(t)])];
    const std::vector<float>& v = b.v[size_t(b.seq[size_t(t)])];
    for (int64_t i = 0; i < kvw; ++i) {
      row[qw + i] = k[size_t(b.pos[size_t(t)] * kvw + i)];
      row[qw + kvw + i] = v[size_t(b.pos[size_t(t)] * kvw + i)];
    }
  }
  return b;
}

// out[t, h] = sum_j softmax_j(scale q_h . k_j) v_j over positions j in [lo(t), pos[t]] of token
// t's own sequence, in double.
std::vector<double> reference(const AttentionShape& s, const Batch& b) {
  const int64_t hd = s.head_dim, kvw = s.n_kv_heads * hd, group = s.n_heads / s.n_kv_heads;
  const int64_t n = static_cast<int64_t>(b.seq.size());
  std::vector<double> out(size_t(n * s.n_heads * hd));
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<float>& kc = b.k[size_t(b.seq[size_t(t)])];
    const std::vector<float>& vc = b.v[size_t(b.seq[size_t(t)])];
    const float* q = b.qkv.data() + t * b.ld_in;
    const int64_t p = b.pos[size_t(t)];
    const int64_t lo = s.sliding_window > 0 ? std::max<int64_t>(0, p - s.sliding_window + 1) : 0;
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> score;
      for (int64_t j = lo; j <= p; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) {
          d += double(q[h * hd + i]) * kc[size_t(j * kvw + kvh * hd + i)];
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

// The pool and block tables for one block size. Block ids are a shuffled permutation with spare
// blocks, so sequences are neither contiguous nor in order. Every pool row that holds no valid
// K/V is NaN, and so are table entries no token needs set to -1 (below every new token's sliding
// window as well as past the end): reading anything it must not makes the result NaN.
struct Pool {
  std::vector<float> k, v;  // [n_blocks, bs, kvw]
  std::vector<int32_t> tables;
  int64_t n_blocks = 0, bs = 0, max_blocks = 0;

  PagedKvCache cache() {
    PagedKvCache c;
    c.k = k.data();
    c.v = v.data();
    c.n_blocks = n_blocks;
    c.block_size = bs;
    c.block_tables = tables.data();
    c.n_seqs = static_cast<int64_t>(tables.size()) / max_blocks;
    c.max_blocks = max_blocks;
    return c;
  }
};

// `with_new`: also place the new tokens' rows (the expected pool after kv_cache_write).
Pool make_pool(const Scenario& sc, const AttentionShape& s, const Batch& b, int64_t bs,
               bool with_new, std::mt19937 rng) {
  const int64_t kvw = s.n_kv_heads * s.head_dim;
  const int64_t n_seqs = static_cast<int64_t>(sc.seqs.size());
  Pool pool;
  pool.bs = bs;
  int64_t total = 0;
  for (const SeqSpec& q : sc.seqs) {
    const int64_t nb = (q.past + q.n_new + bs - 1) / bs;
    total += nb;
    pool.max_blocks = std::max(pool.max_blocks, nb + 1);  // a spare -1 column
  }
  pool.n_blocks = total + 3;
  std::vector<int32_t> ids(size_t(pool.n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  pool.k.assign(size_t(pool.n_blocks * bs * kvw), nan);
  pool.v = pool.k;
  pool.tables.assign(size_t(n_seqs * pool.max_blocks), -1);
  size_t next = 0;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const SeqSpec& q = sc.seqs[size_t(si)];
    const int64_t len = q.past + q.n_new;
    // The lowest position any new token of the sequence attends to.
    const int64_t lo =
        s.sliding_window > 0 ? std::max<int64_t>(0, q.past - s.sliding_window + 1) : 0;
    for (int64_t blk = 0; blk * bs < len; ++blk) {
      const int32_t id = ids[next++];
      if ((blk + 1) * bs <= lo) continue;  // wholly below the window: not needed, stays -1
      pool.tables[size_t(si * pool.max_blocks + blk)] = id;
      const int64_t end = std::min(len, with_new ? len : q.past);
      for (int64_t p = blk * bs; p < std::min(end, (blk + 1) * bs); ++p) {
        const int64_t row = int64_t(id) * bs + p % bs;
        std::copy_n(b.k[size_t(si)].data() + p * kvw, kvw, pool.k.data() + row * kvw);
        std::copy_n(b.v[size_t(si)].data() + p * kvw, kvw, pool.v.data() + row * kvw);
      }
    }
  }
  return pool;
}

int64_t count_bits_diff(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += to_bits(a[i]) != to_bits(b[i]);
  return n;
}

// Each output is a convex combination of V rows with |v| <= 1; the error is the f32 logits
// (head_dim products), the f32 exp and the f32 accumulation, as in test_attention.cc, where the
// measured worst is 1.6e-7 for unit-scale logits. 5e-6 keeps a margin and is far below what a
// wrong block, mask, scale or head mapping gives (~1e-1, or NaN for a row that must not be read).
constexpr double kTol = 5e-6;

// Outputs of out [n_tokens, ldo] (the first qw columns) further than kTol from want
// [n_tokens, qw]; the first one is reported.
int64_t count_bad(const float* out, int64_t ldo, const std::vector<double>& want, int64_t qw,
                  const Batch& b) {
  int64_t bad = 0;
  for (int64_t t = 0; t < static_cast<int64_t>(b.seq.size()); ++t) {
    for (int64_t i = 0; i < qw; ++i) {
      const double got = out[t * ldo + i];
      const double w = want[size_t(t * qw + i)];
      if (!(std::fabs(got - w) <= kTol) && bad++ == 0) {
        UNSCOPED_INFO("token " << t << " (seq " << b.seq[size_t(t)] << " pos " << b.pos[size_t(t)]
                               << ") col " << i << ": " << got << " want " << w);
      }
    }
  }
  return bad;
}

TEST_CASE("paged attention over many sequences matches the double reference",
          "[kernels][attention][paged]") {
  const std::vector<Scenario> scenarios = {
      // Prefill chunks (whole prompts and a chunk after a cached part) mixed with decodes.
      {"mixed prefill and decode", {{0, 33}, {69, 1}, {12, 5}, {0, 1}, {0, 7}}},
      {"decode batch", {{0, 1}, {6, 1}, {16, 1}, {32, 1}, {69, 1}}},
      // A long decode next to short ones: the wide runner splits only the long range.
      {"long decode among short", {{599, 1}, {6, 1}, {16, 1}, {30, 3}}},
  };
  struct Config {
    int64_t heads, kv, hd;
  };
  // Groups of 8, 4, 6 and 3 at head sizes 64 / 128 (f32 on AVX-512: the query heads in the
  // lanes, two or four parts per head, the groups of 6 and 3 padded to 8 and 4 lanes-heads), a
  // head size with a vector tail (group 4) and one smaller than a vector (group 2); at the avx2
  // level (attention_lanes_avx2.h's loop) groups of 8 and 4 at other head sizes (the head size
  // at run time: 40, 80), groups of 7 and 5 (padded to 8 lanes-heads there, as 6 and 3 are),
  // and a group of 4 at an odd head size (9: the other loop); 16 KV heads of 128 without groups
  // (rows of 8 KB f32, which the next block's prefetch asks for in pieces: attention_impl.h).
  const std::vector<Config> configs = {{32, 4, 64}, {8, 2, 128},  {12, 2, 64}, {6, 2, 128},
                                       {4, 1, 80},  {6, 3, 7},    {16, 2, 40}, {14, 2, 72},
                                       {10, 2, 64}, {8, 2, 9},    {16, 16, 128}};
  std::mt19937 rng(31);
  Runners runners;
  IsaRestore restore;
  for (const Config& cfg : configs) {
    for (int64_t window : {0, 5, 20}) {
      const AttentionShape s = make_shape(cfg.heads, cfg.kv, cfg.hd, window);
      const int64_t qw = s.n_heads * s.head_dim;
      for (const Scenario& sc : scenarios) {
        const Batch b = make_batch(sc, s, rng);
        const int64_t n = static_cast<int64_t>(b.seq.size());
        const std::vector<double> want = reference(s, b);
        const float* q = b.qkv.data();
        const float* k = q + qw;
        const float* v = k + s.n_kv_heads * s.head_dim;
        for (int64_t bs : {1, 3, 16, 32}) {
          const std::mt19937 pool_rng(static_cast<uint32_t>(bs * 7 + window));
          const Pool before = make_pool(sc, s, b, bs, false, pool_rng);
          const Pool after = make_pool(sc, s, b, bs, true, pool_rng);
          for (Isa isa : supported_isas()) {
            REQUIRE(set_isa(isa));
            for (auto [rname, runner] : runners.all()) {
              INFO("heads " << cfg.heads << "/" << cfg.kv << " hd " << cfg.hd << " window "
                            << window << " " << sc.name << " block size " << bs << " isa "
                            << isa_name(isa) << " runner " << rname);
              Pool pool = before;
              const PagedKvCache cache = pool.cache();
              kv_cache_write(n, s, k, b.ld_in, v, b.ld_in, b.pos.data(), b.seq.data(), cache);
              CHECK(count_bits_diff(pool.k, after.k) == 0);
              CHECK(count_bits_diff(pool.v, after.v) == 0);
              const int64_t ldo = qw + 9;
              std::vector<float> out(size_t((n - 1) * ldo + qw));
              attention(n, s, q, b.ld_in, cache, b.pos.data(), b.seq.data(), out.data(), ldo,
                        *runner);
              CHECK(count_bad(out.data(), ldo, want, qw, b) == 0);
            }
          }
        }
      }
    }
  }
}

// Peaked scores: q times 300 spreads a head's scores over thousands, so most softmax weights
// e^(s - max) lie far below f32's normal range (exp clamps at e^-87.3). The kernels flush such
// denormals (attention_cpu.cc, DenormalsFlushed: they cost a microcode assist each, 11x the
// time of a 512-key decode on an Emerald Rapids core); the results stay within the same bound
// as for ordinary scores, for decode, split ranges and prefill chunks.
TEST_CASE("paged attention: peaked scores (weights below f32's normal range) match the double "
          "reference", "[kernels][attention][paged]") {
  const Scenario sc = {"mixed prefill and decode", {{0, 33}, {69, 1}, {599, 1}, {0, 7}}};
  std::mt19937 rng(37);
  Runners runners;
  IsaRestore restore;
  int checked = 0;
  // Groups of 8 and 5 (f32 on AVX-512: the query heads in the lanes, 5 padded to 8).
  for (const int64_t heads : {32, 20}) {
    const AttentionShape s = make_shape(heads, 4, 64, 0);
    const int64_t qw = s.n_heads * s.head_dim;
    Batch b = make_batch(sc, s, rng);
    const int64_t n = static_cast<int64_t>(b.seq.size());
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < qw; ++i) b.qkv[size_t(t * b.ld_in + i)] *= 300.0f;
    }
    const std::vector<double> want = reference(s, b);
    const float* q = b.qkv.data();
    const float* k = q + qw;
    const float* v = k + s.n_kv_heads * s.head_dim;
    const Pool before = make_pool(sc, s, b, 16, false, std::mt19937(5));
    for (Isa isa : supported_isas()) {
      REQUIRE(set_isa(isa));
      for (auto [rname, runner] : runners.all()) {
        INFO("heads " << heads << " isa " << isa_name(isa) << " runner " << rname);
        Pool pool = before;
        const PagedKvCache cache = pool.cache();
        kv_cache_write(n, s, k, b.ld_in, v, b.ld_in, b.pos.data(), b.seq.data(), cache);
        std::vector<float> out(size_t(n * qw));
        attention(n, s, q, b.ld_in, cache, b.pos.data(), b.seq.data(), out.data(), qw, *runner);
        // Scores of magnitude up to 0.125 * 300 * 64 = 2400 are rounded in f32 (64 terms, 2^-24
        // each), which moves their weights e^(s - max) relatively by as much: 1e-4 absolute on
        // outputs that are weighted means of |v| <= 1 (measured 5e-6; kTol holds ordinary
        // scores).
        int64_t bad = 0;
        for (int64_t i = 0; i < n * qw; ++i) {
          bad += !(std::fabs(out[size_t(i)] - want[size_t(i)]) <= 1e-4);
        }
        CHECK(bad == 0);
        ++checked;
      }
    }
  }
  CHECK(checked > 0);
}

// Batches laid out as the engine lays them out (each sequence's new tokens together, by
// position): prefill chunks of attention_prefill_min_tokens or more go through the prefill
// kernel (attention_prefill_impl.h), in blocks of query rows against key blocks at fixed
// positions, the rest through the per-token loop; both against the same double reference.
TEST_CASE("paged attention: prefill chunks in batch order match the double reference",
          "[kernels][attention][paged]") {
  const std::vector<Scenario> scenarios = {
      // A whole prompt (several blocks of query rows, the last partial), a chunk after a cached
      // part that starts inside a key block, decodes and a short chunk around them.
      {"prompts and decodes", {{0, 70}, {69, 1}, {45, 38}, {0, 3}, {200, 1}}},
      // One chunk long after its start: a sliding window cuts its first key blocks.
      {"late chunk", {{131, 45}}},
  };
  struct Config {
    int64_t heads, kv, hd;
  };
  // Groups of 8, 4, 7 (query rows no multiple of the vector width), 1 (MHA) and 16; head sizes
  // with vector and scalar tails.
  const std::vector<Config> configs = {{32, 4, 64},  {8, 2, 128}, {28, 4, 64},
                                       {3, 3, 80},   {16, 1, 72}, {6, 3, 7}};
  std::mt19937 rng(41);
  Runners runners;
  IsaRestore restore;
  for (const Config& cfg : configs) {
    for (int64_t window : {0, 5, 40}) {
      const AttentionShape s = make_shape(cfg.heads, cfg.kv, cfg.hd, window);
      const int64_t qw = s.n_heads * s.head_dim;
      for (const Scenario& sc : scenarios) {
        const Batch b = make_batch(sc, s, rng, false);
        const int64_t n = static_cast<int64_t>(b.seq.size());
        const std::vector<double> want = reference(s, b);
        const float* q = b.qkv.data();
        const float* k = q + qw;
        const float* v = k + s.n_kv_heads * s.head_dim;
        for (int64_t bs : {1, 16, 48}) {
          const std::mt19937 pool_rng(static_cast<uint32_t>(bs * 5 + window));
          Pool pool = make_pool(sc, s, b, bs, false, pool_rng);
          for (Isa isa : supported_isas()) {
            REQUIRE(set_isa(isa));
            // The first scenario's 70-token prompt takes the prefill kernel on every level.
            CHECK(attention_prefill_min_tokens(s) <= 38);
            for (auto [rname, runner] : runners.all()) {
              INFO("heads " << cfg.heads << "/" << cfg.kv << " hd " << cfg.hd << " window "
                            << window << " " << sc.name << " block size " << bs << " isa "
                            << isa_name(isa) << " runner " << rname);
              Pool p = pool;
              const PagedKvCache cache = p.cache();
              kv_cache_write(n, s, k, b.ld_in, v, b.ld_in, b.pos.data(), b.seq.data(), cache);
              // out on top of q (the engine's in-place call): rows of ld_in.
              std::vector<float> io(b.qkv);
              attention(n, s, io.data(), b.ld_in, cache, b.pos.data(), b.seq.data(), io.data(),
                        b.ld_in, *runner);
              CHECK(count_bad(io.data(), b.ld_in, want, qw, b) == 0);
              int64_t touched = 0;  // k, v and the pad of each row
              for (int64_t t = 0; t < n; ++t) {
                for (int64_t i = qw; i < b.ld_in; ++i) {
                  const size_t at = size_t(t * b.ld_in + i);
                  touched += to_bits(io[at]) != to_bits(b.qkv[at]);
                }
              }
              CHECK(touched == 0);
            }
          }
        }
      }
    }
  }
}

// With GemmPrecision::kBf16 on an AVX512-BF16 level, the prefill kernel multiplies in bf16
// (attention_prefill_avx512_bf16.cc). Its stated bound, per output of token t and head h: with
// d = 2^-8 scale max_j sum_i |q_i k_ji| over the keys the token sees, |error| <= max |v|
// (e^(2d) - 1 + 2^-8), plus f32 rounding (1e-5 here). Elsewhere kBf16 leaves attention in f32 and
// the tight tolerance holds. The per-token loop (decodes, short chunks) is f32 at every precision.
TEST_CASE("paged attention: the bf16 prefill kernel within its stated bound",
          "[kernels][attention][paged]") {
  const std::vector<Scenario> scenarios = {
      {"prompts and decodes", {{0, 70}, {69, 1}, {45, 38}, {200, 1}}},
      {"late chunk", {{131, 45}}},
  };
  struct Config {
    int64_t heads, kv, hd;
  };
  // Odd head sizes pad the pairs along d; odd key counts pad the pairs of weights.
  const std::vector<Config> configs = {{32, 4, 64}, {8, 2, 128}, {28, 4, 64}, {3, 3, 81},
                                       {16, 1, 72}, {6, 3, 7}};
  std::mt19937 rng(43);
  Runners runners;
  IsaRestore restore;
  const Bf16PanelsPolicy policy = bf16_panels_policy();
  set_bf16_panels_policy(Bf16PanelsPolicy::kOn);  // also where vdpbf16ps runs at half rate
  ScopedGemmPrecision precision(GemmPrecision::kBf16);
  for (const Config& cfg : configs) {
    for (int64_t window : {0, 40}) {
      const AttentionShape s = make_shape(cfg.heads, cfg.kv, cfg.hd, window);
      const int64_t qw = s.n_heads * s.head_dim, kvw = s.n_kv_heads * s.head_dim;
      const int64_t group = s.n_heads / s.n_kv_heads;
      for (const Scenario& sc : scenarios) {
        const Batch b = make_batch(sc, s, rng, false);
        const int64_t n = static_cast<int64_t>(b.seq.size());
        const std::vector<double> want = reference(s, b);
        // The bound of every (token, head).
        std::vector<double> bound(size_t(n * s.n_heads));
        for (int64_t t = 0; t < n; ++t) {
          const int64_t p = b.pos[size_t(t)];
          const std::vector<float>& kc = b.k[size_t(b.seq[size_t(t)])];
          const std::vector<float>& vc = b.v[size_t(b.seq[size_t(t)])];
          const int64_t lo = attention_first_key(p, window);
          for (int64_t h = 0; h < s.n_heads; ++h) {
            const int64_t kvh = h / group;
            double d = 0, vmax = 0;
            for (int64_t j = lo; j <= p; ++j) {
              double sum = 0;
              for (int64_t i = 0; i < s.head_dim; ++i) {
                sum += std::fabs(double(b.qkv[size_t(t * b.ld_in + h * s.head_dim + i)]) *
                                 kc[size_t(j * kvw + kvh * s.head_dim + i)]);
                vmax = std::max(vmax, double(std::fabs(vc[size_t(j * kvw + kvh * s.head_dim + i)])));
              }
              d = std::max(d, sum);
            }
            d *= 0x1p-8 * (1 + 0x1p-9) * s.scale;
            bound[size_t(t * s.n_heads + h)] = vmax * (std::expm1(2 * d) + 0x1p-8) + 1e-5;
          }
        }
        const float* q = b.qkv.data();
        const float* k = q + qw;
        const float* v = k + kvw;
        Pool pool = make_pool(sc, s, b, 16, false, std::mt19937(7));
        for (Isa isa : supported_isas()) {
          REQUIRE(set_isa(isa));
          const bool bf16 = has_avx512_bf16();
          for (auto [rname, runner] : runners.all()) {
            INFO("heads " << cfg.heads << "/" << cfg.kv << " hd " << cfg.hd << " window "
                          << window << " " << sc.name << " isa " << isa_name(isa) << " runner "
                          << rname);
            Pool pl = pool;
            const PagedKvCache cache = pl.cache();
            kv_cache_write(n, s, k, b.ld_in, v, b.ld_in, b.pos.data(), b.seq.data(), cache);
            std::vector<float> out(size_t(n * qw));
            attention(n, s, q, b.ld_in, cache, b.pos.data(), b.seq.data(), out.data(), qw,
                      *runner);
            int64_t bad = 0;
            double worst = 0, worst_ratio = 0;
            for (int64_t t = 0; t < n; ++t) {
              for (int64_t i = 0; i < qw; ++i) {
                const double err = std::fabs(out[size_t(t * qw + i)] - want[size_t(t * qw + i)]);
                const double lim = bf16 ? bound[size_t(t * s.n_heads + i / s.head_dim)] : kTol;
                worst = std::max(worst, err);
                worst_ratio = std::max(worst_ratio, err / lim);
                if (!(err <= lim) && bad++ == 0) {
                  UNSCOPED_INFO("token " << t << " col " << i << ": error " << err << " bound "
                                         << lim);
                }
              }
            }
            CHECK(bad == 0);
            // The bf16 kernel did run: its rounding shows far above f32's.
            if (bf16) CHECK(worst > 1e-4);
            if (std::getenv("ATTN_MEASURE")) {
              WARN("bf16 " << bf16 << " worst " << worst << " of bound " << worst_ratio);
            }
          }
        }
      }
    }
  }
  set_bf16_panels_policy(policy);
}

// Decoding step by step in a paged cache, one sequence per call or all sequences in one call,
// gives the same bits with one worker: the batch composition must not change a sequence's result.
TEST_CASE("paged attention: a sequence's result does not depend on its batch",
          "[kernels][attention][paged]") {
  const AttentionShape s = make_shape(8, 2, 64, 0);
  const Scenario sc = {"decode", {{40, 1}, {3, 1}, {77, 1}}};
  std::mt19937 rng(32);
  const Batch b = make_batch(sc, s, rng);
  const int64_t n = static_cast<int64_t>(b.seq.size()), qw = s.n_heads * s.head_dim;
  const float* q = b.qkv.data();
  const float* k = q + qw;
  const float* v = k + s.n_kv_heads * s.head_dim;
  SerialRunner serial;
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    INFO("isa " << isa_name(isa));
    Pool together = make_pool(sc, s, b, 16, false, std::mt19937(5));
    Pool alone = together;
    std::vector<float> out1(size_t(n * qw)), out2(size_t(n * qw));
    kv_cache_write(n, s, k, b.ld_in, v, b.ld_in, b.pos.data(), b.seq.data(), together.cache());
    attention(n, s, q, b.ld_in, together.cache(), b.pos.data(), b.seq.data(), out1.data(), qw,
              serial);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t o = t * b.ld_in;
      kv_cache_write(1, s, k + o, b.ld_in, v + o, b.ld_in, &b.pos[size_t(t)], &b.seq[size_t(t)],
                     alone.cache());
      attention(1, s, q + o, b.ld_in, alone.cache(), &b.pos[size_t(t)], &b.seq[size_t(t)],
                out2.data() + t * qw, qw, serial);
    }
    CHECK(count_bits_diff(out1, out2) == 0);
  }
}

// The op through a one-node graph: bad indices are errors naming the node, token, sequence and
// value, raised before the cache is written; unneeded -1 entries are accepted.
TEST_CASE("attention op validates seq ids, positions and block ids",
          "[kernels][attention][paged]") {
  using graph::Dim;
  const int64_t heads = 2, kv = 1, hd = 4, bs = 2, n_blocks = 4;
  auto build = [&](int64_t window) {
    graph::Graph g;
    const Dim t = Dim::sym("t");
    const auto q = g.add_input("q", DType::kF32, {t, Dim::fixed(heads * hd)});
    const auto k = g.add_input("k", DType::kF32, {t, Dim::fixed(kv * hd)});
    const auto v = g.add_input("v", DType::kF32, {t, Dim::fixed(kv * hd)});
    const std::vector<Dim> pool = {Dim::sym("nb"), Dim::sym("bs"), Dim::fixed(kv * hd)};
    const auto kc = g.add_input("k_cache", DType::kF32, pool);
    const auto vc = g.add_input("v_cache", DType::kF32, pool);
    const auto pos = g.add_input("positions", DType::kI32, {t});
    const auto seq = g.add_input("seq_ids", DType::kI32, {t});
    const auto tab =
        g.add_input("block_tables", DType::kI32, {Dim::sym("n_seqs"), Dim::sym("max_blocks")});
    g.mark_output(g.add("attention", "layer.attn", {q, k, v, kc, vc, pos, seq, tab},
                        {{"n_heads", heads},
                         {"n_kv_heads", kv},
                         {"head_dim", hd},
                         {"scale", 0.5},
                         {"sliding_window", window}}));
    return g;
  };
  const int64_t pool_floats = n_blocks * bs * kv * hd;
  const Tensor k_cache =
      Tensor::from_f32({n_blocks, bs, kv * hd}, std::vector<float>(size_t(pool_floats), 0.5f));
  const Tensor v_cache = k_cache.clone();
  const std::vector<float> cache_before(k_cache.data<float>(), k_cache.data<float>() + pool_floats);
  auto inputs = [&](std::vector<int32_t> pos, std::vector<int32_t> seq,
                    std::vector<int32_t> tables, int64_t n_seqs) {
    const int64_t n = static_cast<int64_t>(pos.size());
    std::map<std::string, Tensor> in;
    in["q"] = Tensor::from_f32({n, heads * hd}, std::vector<float>(size_t(n * heads * hd), 1.0f));
    in["k"] = Tensor::from_f32({n, kv * hd}, std::vector<float>(size_t(n * kv * hd), 2.0f));
    in["v"] = in["k"].clone();
    in["k_cache"] = k_cache;
    in["v_cache"] = v_cache;
    in["positions"] = Tensor::from_i32({n}, pos);
    in["seq_ids"] = Tensor::from_i32({n}, seq);
    const int64_t mb = static_cast<int64_t>(tables.size()) / n_seqs;
    in["block_tables"] = Tensor::from_i32({n_seqs, mb}, tables);
    return in;
  };
  SerialRunner runner;
  const graph::Graph g = build(0);
  graph::Executor ex(g, runner);
  // Sequence 0 holds blocks 2, 0; sequence 1 holds block 1 only.
  const std::vector<int32_t> tables = {2, 0, 1, -1};
  auto fails = [&](std::map<std::string, Tensor> in, const std::vector<std::string>& parts) {
    try {
      ex.run(in);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      const std::string msg = e.what();
      for (const std::string& p : parts) {
        INFO(msg);
        CHECK(msg.find(p) != std::string::npos);
      }
    }
    const float* kc = k_cache.data<float>();
    CHECK(std::equal(cache_before.begin(), cache_before.end(), kc));  // nothing was written
  };
  fails(inputs({0, 1}, {0, 2}, tables, 2), {"'layer.attn'", "token 1", "sequence id 2"});
  fails(inputs({0, -1}, {0, 0}, tables, 2), {"token 1", "sequence 0", "position -1"});
  fails(inputs({0, 4}, {0, 0}, tables, 2), {"token 1", "sequence 0", "position 4"});
  fails(inputs({0, 1, 2}, {1, 1, 1}, tables, 2),
        {"token 2", "sequence 1", "block_tables[1][1] = -1"});
  fails(inputs({3}, {0}, {2, 4, 1, -1}, 2), {"token 0", "block_tables[0][1] = 4"});
  // A -1 beyond the highest position is fine, and the new rows are written where they belong.
  ex.run(inputs({0, 1, 0, 2}, {0, 0, 1, 0}, tables, 2));
  for (auto [block, row] : std::vector<std::pair<int, int>>{{2, 0}, {2, 1}, {1, 0}, {0, 0}}) {
    CHECK(k_cache.data<float>()[(block * bs + row) * kv * hd] == 2.0f);
  }
  CHECK(k_cache.data<float>()[(0 * bs + 1) * kv * hd] == 0.5f);
  // With a window of 2, position 3 needs only block index 1: a -1 below the window is fine.
  const graph::Graph gw = build(2);
  graph::Executor exw(gw, runner);
  CHECK_NOTHROW(exw.run(inputs({3}, {0}, {-1, 3}, 1)));
  // But position 2 of the same table needs index 0 (it sees position 1).
  CHECK_THROWS_WITH(exw.run(inputs({2}, {0}, {-1, 3}, 1)),
                    Catch::Contains("block_tables[0][0] = -1"));
}

// The op with a quantized cache (attribute kv_dtype): i8 raw pools of kv_row_bytes per row, the
// same results as the kernels called directly on an identical pool (test_kv_quant.cc checks the
// kernels against a double reference), and pools of the wrong format or row size rejected at
// plan time with the node and input named.
TEST_CASE("attention op with a quantized KV cache", "[kernels][attention][paged]") {
  using graph::Dim;
  const int64_t heads = 4, kv = 2, hd = 40, bs = 3, n_blocks = 5;
  auto build = [&](const std::string& kv_dtype, DType pool_dtype, int64_t row) {
    graph::Graph g;
    const Dim t = Dim::sym("t");
    const auto q = g.add_input("q", DType::kF32, {t, Dim::fixed(heads * hd)});
    const auto k = g.add_input("k", DType::kF32, {t, Dim::fixed(kv * hd)});
    const auto v = g.add_input("v", DType::kF32, {t, Dim::fixed(kv * hd)});
    const std::vector<Dim> pool = {Dim::sym("nb"), Dim::sym("bs"), Dim::fixed(row)};
    const auto kc = g.add_input("k_cache", pool_dtype, pool);
    const auto vc = g.add_input("v_cache", pool_dtype, pool);
    const auto pos = g.add_input("positions", DType::kI32, {t});
    const auto seq = g.add_input("seq_ids", DType::kI32, {t});
    const auto tab =
        g.add_input("block_tables", DType::kI32, {Dim::sym("n_seqs"), Dim::sym("max_blocks")});
    g.mark_output(g.add("attention", "layer.attn", {q, k, v, kc, vc, pos, seq, tab},
                        {{"n_heads", heads},
                         {"n_kv_heads", kv},
                         {"head_dim", hd},
                         {"scale", 0.25},
                         {"kv_dtype", kv_dtype}}));
    return g;
  };
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const int64_t n = 7;
  std::vector<float> qv(size_t(n * heads * hd)), kvv(size_t(n * kv * hd)), vv(kvv.size());
  for (float& x : qv) x = unit(rng);
  for (float& x : kvv) x = unit(rng);
  for (float& x : vv) x = unit(rng);
  // One sequence of 7 tokens in blocks 4, 1, 2.
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6}, seq(7, 0), tables = {4, 1, 2};
  SerialRunner runner;
  for (KvDtype dt : {KvDtype::kBF16, KvDtype::kF8E4M3, KvDtype::kI8, KvDtype::kI4}) {
    INFO("kv_dtype " << kv_dtype_name(dt));
    const int64_t row = kv_row_bytes(dt, kv, hd);
    const graph::Graph g = build(kv_dtype_name(dt), DType::kI8, row);
    graph::Executor ex(g, runner);
    const Tensor k_cache = Tensor::zeros({n_blocks, bs, row}, DType::kI8);
    const Tensor v_cache = Tensor::zeros({n_blocks, bs, row}, DType::kI8);
    std::map<std::string, Tensor> in;
    in["q"] = Tensor::from_f32({n, heads * hd}, qv);
    in["k"] = Tensor::from_f32({n, kv * hd}, kvv);
    in["v"] = Tensor::from_f32({n, kv * hd}, vv);
    in["k_cache"] = k_cache;
    in["v_cache"] = v_cache;
    in["positions"] = Tensor::from_i32({n}, pos);
    in["seq_ids"] = Tensor::from_i32({n}, seq);
    in["block_tables"] = Tensor::from_i32({1, 3}, tables);
    const Tensor out = ex.run(in)[0];

    std::vector<uint8_t> kd(size_t(n_blocks * bs * row)), vd(kd.size());
    PagedKvCache c;
    c.k = kd.data();
    c.v = vd.data();
    c.dtype = dt;
    c.n_blocks = n_blocks;
    c.block_size = bs;
    c.block_tables = tables.data();
    c.n_seqs = 1;
    c.max_blocks = 3;
    AttentionShape s = make_shape(heads, kv, hd, 0);
    s.scale = 0.25f;
    std::vector<float> want(qv.size());
    kv_cache_write(n, s, kvv.data(), kv * hd, vv.data(), kv * hd, pos.data(), seq.data(), c);
    attention(n, s, qv.data(), heads * hd, c, pos.data(), seq.data(), want.data(), heads * hd,
              runner);
    CHECK(std::equal(kd.begin(), kd.end(), k_cache.data<uint8_t>()));
    CHECK(std::equal(vd.begin(), vd.end(), v_cache.data<uint8_t>()));
    const std::vector<float> got(out.data<float>(), out.data<float>() + want.size());
    CHECK(count_bits_diff(got, want) == 0);

    // A pool sized for another format, an f32 pool, and an unknown format.
    in["k_cache"] = Tensor::zeros({n_blocks, bs, row + 1}, DType::kI8);
    in["v_cache"] = Tensor::zeros({n_blocks, bs, row + 1}, DType::kI8);
    const graph::Graph bad_row = build(kv_dtype_name(dt), DType::kI8, row + 1);
    CHECK_THROWS_WITH(graph::Executor(bad_row, runner).run(in),
                      Catch::Contains("'layer.attn'") && Catch::Contains("input 3 (k_cache)") &&
                          Catch::Contains(std::to_string(row)));
    in["k_cache"] = Tensor::zeros({n_blocks, bs, kv * hd}, DType::kF32);
    in["v_cache"] = Tensor::zeros({n_blocks, bs, kv * hd}, DType::kF32);
    const graph::Graph f32_pool = build(kv_dtype_name(dt), DType::kF32, kv * hd);
    CHECK_THROWS_WITH(graph::Executor(f32_pool, runner).run(in),
                      Catch::Contains("'layer.attn'") && Catch::Contains("must be i8"));
  }
  const graph::Graph unknown = build("int3", DType::kF32, kv * hd);
  auto run_unknown = [&] {
    graph::Executor ex(unknown, runner);
    std::map<std::string, Tensor> in;
    in["q"] = Tensor::from_f32({1, heads * hd}, std::vector<float>(size_t(heads * hd)));
    in["k"] = Tensor::from_f32({1, kv * hd}, std::vector<float>(size_t(kv * hd)));
    in["v"] = in["k"].clone();
    in["k_cache"] = Tensor::zeros({n_blocks, bs, kv * hd}, DType::kF32);
    in["v_cache"] = Tensor::zeros({n_blocks, bs, kv * hd}, DType::kF32);
    in["positions"] = Tensor::from_i32({1}, {0});
    in["seq_ids"] = Tensor::from_i32({1}, {0});
    in["block_tables"] = Tensor::from_i32({1, 1}, {0});
    ex.run(in);
  };
  CHECK_THROWS_WITH(run_unknown(), Catch::Contains("unknown kv_dtype 'int3'"));
}

}  // namespace
}  // namespace sampan::cpu
