#include <catch2/catch.hpp>

#include <algorithm>
#include <list>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/kv_block_manager.h"

namespace sampan::runtime {
// Defined in kv_block_manager.cc; narrows the chain hash so that collisions are everyday events.
struct BlockManagerTestPeer {
  static void set_hash_mask(BlockManager& m, uint64_t mask);
};
}  // namespace sampan::runtime

using sampan::runtime::BlockManager;
using sampan::runtime::BlockManagerTestPeer;
using sampan::runtime::SeqBlocks;
using Tokens = std::vector<int32_t>;

namespace {

Tokens iota_tokens(int32_t n, int32_t start) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Runs a sequence's whole prompt through the manager as the engine would: take the cached
// prefix, reserve the rest, "compute" it and commit. Returns the matched token count.
int64_t admit_and_compute(BlockManager& m, SeqBlocks& seq, const Tokens& prompt) {
  const int64_t hit = m.match_prefix(prompt, seq);
  REQUIRE(m.reserve(seq, static_cast<int64_t>(prompt.size())));
  m.commit(seq, prompt, static_cast<int64_t>(prompt.size()));
  return hit;
}

}  // namespace

TEST_CASE("BlockManager rejects bad sizes") {
  CHECK_THROWS_AS(BlockManager(0, 16, true), sampan::Error);
  CHECK_THROWS_AS(BlockManager(8, 0, true), sampan::Error);
}

TEST_CASE("reserve grows across block boundaries and is all or nothing") {
  BlockManager m(5, 4, true);
  CHECK(m.blocks_for(0) == 0);
  CHECK(m.blocks_for(1) == 1);
  CHECK(m.blocks_for(4) == 1);
  CHECK(m.blocks_for(5) == 2);
  SeqBlocks a;
  REQUIRE(m.reserve(a, 1));
  CHECK(a.blocks.size() == 1);
  REQUIRE(m.reserve(a, 4));  // still inside the first block
  CHECK(a.blocks.size() == 1);
  REQUIRE(m.reserve(a, 5));
  CHECK(a.blocks.size() == 2);
  REQUIRE(m.reserve(a, 3));  // shrinking requests change nothing
  CHECK(a.blocks.size() == 2);
  CHECK(m.num_available() == 3);
  CHECK(m.usage() == Approx(2.0 / 5.0));

  SeqBlocks b;
  CHECK_FALSE(m.reserve(b, 4 * 4));  // needs 4, only 3 left: nothing taken
  CHECK(b.blocks.empty());
  CHECK(m.num_available() == 3);
  REQUIRE(m.reserve(b, 3 * 4));
  CHECK(m.num_available() == 0);
  CHECK_FALSE(m.reserve(a, 9));
  CHECK(a.blocks.size() == 2);

  std::set<int32_t> all(a.blocks.begin(), a.blocks.end());
  all.insert(b.blocks.begin(), b.blocks.end());
  CHECK(all.size() == 5);  // no block handed out twice

  m.release(b);
  CHECK(b.blocks.empty());
  CHECK(m.num_available() == 3);
  CHECK(m.stats().used_blocks == 2);
  CHECK(m.stats().cached_blocks == 0);  // nothing committed, so nothing cached
  m.release(a);
  CHECK(m.num_available() == 5);
  CHECK(m.usage() == 0.0);
}

TEST_CASE("prefix match takes 0, 1 or 2 full blocks and never the whole prompt") {
  const int64_t bs = 4;
  BlockManager m(16, bs, true);
  const Tokens first = iota_tokens(10, 100);  // 2 full blocks + 2 tokens
  SeqBlocks a;
  CHECK(admit_and_compute(m, a, first) == 0);
  CHECK(a.n_committed == 8);
  CHECK(a.hashes.size() == 2);
  m.release(a);
  CHECK(m.stats().cached_blocks == 2);

  SECTION("0 blocks: first token differs") {
    Tokens p = first;
    p[0] = 7;
    SeqBlocks s;
    CHECK(m.match_prefix(p, s) == 0);
    CHECK(s.blocks.empty());
  }
  SECTION("1 block: divergence inside the second block") {
    Tokens p = first;
    p[6] = 7;
    SeqBlocks s;
    CHECK(m.match_prefix(p, s) == 4);
    CHECK(s.blocks.size() == 1);
    CHECK(s.n_committed == 4);
    CHECK(m.stats().cached_blocks == 1);
    CHECK(m.stats().used_blocks == 1);
  }
  SECTION("2 blocks") {
    Tokens p = first;
    p.push_back(5);
    SeqBlocks s;
    CHECK(m.match_prefix(p, s) == 8);
    CHECK(s.blocks.size() == 2);
    CHECK(s.hashes.size() == 2);
  }
  SECTION("prompt of exactly 2 blocks matches only 1") {
    const Tokens p(first.begin(), first.begin() + 8);
    SeqBlocks s;
    CHECK(m.match_prefix(p, s) == 4);
  }
  SECTION("prompt of exactly 1 block matches nothing") {
    const Tokens p(first.begin(), first.begin() + 4);
    SeqBlocks s;
    CHECK(m.match_prefix(p, s) == 0);
  }
  SECTION("query and hit counters") {
    SeqBlocks s;
    Tokens p = first;
    p[6] = 7;
    m.match_prefix(p, s);
    const auto st = m.stats();
    CHECK(st.prefix_query_tokens == 10 + 10);
    CHECK(st.prefix_hit_tokens == 4);
  }
}

TEST_CASE("match_prefix refuses a sequence that already holds blocks") {
  BlockManager m(4, 4, true);
  SeqBlocks s;
  REQUIRE(m.reserve(s, 3));
  CHECK_THROWS_AS(m.match_prefix(iota_tokens(9, 0), s), sampan::Error);
}

TEST_CASE("two sequences share cached blocks by reference count") {
  BlockManager m(8, 4, true);
  const Tokens prompt = iota_tokens(9, 1);
  SeqBlocks a;
  admit_and_compute(m, a, prompt);  // 3 blocks, 2 committed
  SeqBlocks b;
  CHECK(m.match_prefix(prompt, b) == 8);
  CHECK(b.blocks[0] == a.blocks[0]);
  CHECK(b.blocks[1] == a.blocks[1]);
  CHECK(m.stats().used_blocks == 3);  // shared blocks count once
  REQUIRE(m.reserve(b, 9));
  CHECK(b.blocks[2] != a.blocks[2]);  // the partial block is private
  CHECK(m.stats().used_blocks == 4);

  m.release(a);  // b still holds the shared blocks: they stay in use, a's partial block is free
  CHECK(m.stats().used_blocks == 3);
  CHECK(m.stats().cached_blocks == 0);
  CHECK(m.num_available() == 5);
  m.release(b);
  CHECK(m.stats().used_blocks == 0);
  CHECK(m.stats().cached_blocks == 2);
  CHECK(m.num_available() == 8);
}

TEST_CASE("committing generated tokens extends the chain") {
  const int64_t bs = 4;
  BlockManager m(8, bs, true);
  Tokens toks = iota_tokens(6, 10);
  SeqBlocks a;
  admit_and_compute(m, a, toks);
  CHECK(a.n_committed == 4);
  for (int32_t g = 0; g < 5; ++g) {  // decode 5 tokens one at a time: 11 tokens in all
    toks.push_back(50 + g);
    REQUIRE(m.reserve(a, static_cast<int64_t>(toks.size())));
    m.commit(a, toks, static_cast<int64_t>(toks.size()));
  }
  CHECK(a.n_committed == 8);
  CHECK(a.hashes.size() == 2);
  m.release(a);

  Tokens follow = toks;  // prompt + generated text resent as the next turn's prompt
  follow.push_back(99);
  SeqBlocks b;
  CHECK(m.match_prefix(follow, b) == 8);
}

TEST_CASE("cached blocks are evicted least recently released first") {
  const int64_t bs = 2;
  BlockManager m(4, bs, true);
  const Tokens p1 = {1, 1, 9};
  const Tokens p2 = {2, 2, 9};
  const Tokens p3 = {3, 3, 9};
  SeqBlocks a, b, c;
  admit_and_compute(m, a, p1);
  admit_and_compute(m, b, p2);
  m.release(a);  // p1's full block cached first
  m.release(b);  // then p2's
  CHECK(m.stats().cached_blocks == 2);
  CHECK(m.num_available() == 4);
  admit_and_compute(m, c, p3);  // 2 blocks: both free ones, nothing evicted yet
  CHECK(m.stats().evictions == 0);
  SeqBlocks d;
  REQUIRE(m.reserve(d, 1));  // no free block left: evicts p1 (released earliest)
  CHECK(m.stats().evictions == 1);
  CHECK(m.stats().cached_blocks == 1);
  m.release(d);
  m.release(c);

  SeqBlocks e, f;
  CHECK(m.match_prefix(p1, e) == 0);  // eviction removed the hash: p1 misses
  CHECK(m.match_prefix(p2, f) == 2);  // p2 survived
}

TEST_CASE("a matched block is no longer evictable, and touching renews it in the LRU") {
  BlockManager m(3, 2, true);
  SeqBlocks a, b;
  admit_and_compute(m, a, {1, 1, 9});
  m.release(a);
  admit_and_compute(m, b, {2, 2, 9});
  m.release(b);  // LRU: {1,1} then {2,2}
  SeqBlocks c;
  CHECK(m.match_prefix(Tokens{1, 1, 7}, c) == 2);
  m.release(c);  // {1,1} is now the most recently released: LRU {2,2}, {1,1}
  SeqBlocks d;
  REQUIRE(m.reserve(d, 4));  // the free block, then evicts {2,2}
  m.release(d);
  SeqBlocks e, f;
  CHECK(m.match_prefix(Tokens{2, 2, 7}, e) == 0);
  CHECK(m.match_prefix(Tokens{1, 1, 7}, f) == 2);
}

TEST_CASE("evicting a parent block drops its cached children") {
  BlockManager m(3, 2, true);
  SeqBlocks a;
  admit_and_compute(m, a, {1, 1, 2, 2, 9});
  m.release(a);  // {1,1} and {1,1,2,2} cached; the child is evicted first
  SeqBlocks b;
  REQUIRE(m.reserve(b, 4));  // free block + evicts the child
  CHECK(m.stats().cached_blocks == 1);
  m.release(b);
  SeqBlocks c;
  CHECK(m.match_prefix(Tokens{1, 1, 2, 2, 9}, c) == 2);
}

TEST_CASE("clear_prefix_cache drops cached blocks, shared ones keep working") {
  BlockManager m(6, 2, true);
  SeqBlocks a, b;
  admit_and_compute(m, a, {1, 2, 3, 4, 5});
  admit_and_compute(m, b, {7, 7, 7});
  m.release(b);
  CHECK(m.stats().cached_blocks == 1);
  m.clear_prefix_cache();
  CHECK(m.stats().cached_blocks == 0);
  CHECK(m.stats().used_blocks == 3);  // a's blocks stay held
  CHECK(m.num_available() == 3);
  SeqBlocks c, d;
  CHECK(m.match_prefix(Tokens{7, 7, 7}, c) == 0);
  CHECK(m.match_prefix(Tokens{1, 2, 3, 4, 5}, d) == 0);  // a's blocks are no longer shared
  m.release(a);
  CHECK(m.stats().cached_blocks == 0);
  CHECK(m.num_available() == 6);
}

TEST_CASE("prefix caching off: no matches, released blocks become free") {
  BlockManager m(4, 2, false);
  SeqBlocks a;
  const Tokens p = {1, 2, 3, 4, 5};
  admit_and_compute(m, a, p);
  CHECK(a.n_committed == 4);  // commit still tracks progress
  m.release(a);
  CHECK(m.stats().cached_blocks == 0);
  SeqBlocks b;
  CHECK(m.match_prefix(p, b) == 0);
  CHECK(m.stats().prefix_query_tokens == 10);
  CHECK(m.stats().prefix_hit_tokens == 0);
}

TEST_CASE("hash collisions never hand out a block with other tokens") {
  BlockManager m(8, 2, true);
  BlockManagerTestPeer::set_hash_mask(m, 0);  // every block of every chain hashes to 0
  SeqBlocks a, b;
  admit_and_compute(m, a, {1, 2, 3, 4, 9});
  admit_and_compute(m, b, {5, 6, 3, 4, 9});  // same second block under another parent
  m.release(a);
  m.release(b);
  CHECK(m.stats().cached_blocks == 4);  // colliding contents are all cached side by side

  SeqBlocks c, d, e, f;
  CHECK(m.match_prefix(Tokens{1, 2, 3, 4, 0}, c) == 4);
  CHECK(m.match_prefix(Tokens{5, 6, 3, 4, 0}, d) == 4);
  CHECK(c.blocks[1] != d.blocks[1]);
  CHECK(m.match_prefix(Tokens{1, 2, 5, 6, 0}, e) == 2);  // second block: tokens differ
  CHECK(m.match_prefix(Tokens{2, 1, 3, 4, 0}, f) == 0);  // first block differs: chain stops
}

TEST_CASE("blocks are shared only within one namespace (LoRA adapter)", "[prefix]") {
  for (uint64_t mask : {~0ULL, 0ULL}) {  // also when every chain hash collides
    CAPTURE(mask);
    BlockManager m(16, 2, true);
    BlockManagerTestPeer::set_hash_mask(m, mask);
    SeqBlocks base, lora1;
    lora1.ns = 1;
    CHECK(admit_and_compute(m, base, {1, 2, 3, 4, 9}) == 0);
    CHECK(admit_and_compute(m, lora1, {1, 2, 3, 4, 9}) == 0);  // same tokens, other adapter
    CHECK(base.blocks[0] != lora1.blocks[0]);
    m.release(base);
    m.release(lora1);
    SeqBlocks again_base, again_lora1, lora2;
    again_lora1.ns = 1;
    lora2.ns = 2;
    CHECK(m.match_prefix(Tokens{1, 2, 3, 4, 0}, again_base) == 4);
    CHECK(m.match_prefix(Tokens{1, 2, 3, 4, 0}, again_lora1) == 4);
    CHECK(m.match_prefix(Tokens{1, 2, 3, 4, 0}, lora2) == 0);
    CHECK(again_base.blocks[0] != again_lora1.blocks[0]);
    CHECK(again_base.blocks[1] != again_lora1.blocks[1]);
  }
}

// ---- randomized test against a plain reference model -----------------------------------------

namespace {

// The cache rules restated on full token prefixes instead of hashes and trees: a block's key is
// every token from the sequence start to its end; a key is registered only when its parent key
// is; evicting a key drops every registered key that extends it. Ids are the reference's own.
struct RefModel {
  int64_t n_blocks, bs;
  bool on;
  std::vector<int> refcount;
  std::vector<Tokens> key;  // registered content of each block
  std::vector<char> reg;
  std::map<Tokens, int> by_key;
  std::list<int> lru;
  std::vector<int> free_ids;
  int64_t used = 0, evictions = 0, query = 0, hit = 0;

  RefModel(int64_t n, int64_t b, bool o)
      : n_blocks(n), bs(b), on(o), refcount(n, 0), key(n), reg(n, 0) {
    for (int i = 0; i < n; ++i) free_ids.push_back(i);
  }

  struct Seq {
    std::vector<int> blocks;
    int64_t n_committed = 0;
  };

  void unregister(int r) {
    reg[r] = 0;
    by_key.erase(key[r]);
    if (refcount[r] == 0) {
      lru.remove(r);
      free_ids.push_back(r);
    }
  }

  void drop_extending(const Tokens& k) {
    std::vector<int> victims;
    for (auto& [kk, r] : by_key) {
      if (kk.size() >= k.size() && std::equal(k.begin(), k.end(), kk.begin())) victims.push_back(r);
    }
    for (int r : victims) unregister(r);
  }

  void take(int r) {
    if (refcount[r]++ == 0) {
      lru.remove(r);
      ++used;
    }
  }

  int64_t match(const Tokens& p, Seq& s) {
    query += static_cast<int64_t>(p.size());
    if (!on || p.empty()) return 0;
    for (int64_t i = 0; i < (static_cast<int64_t>(p.size()) - 1) / bs; ++i) {
      auto it = by_key.find(Tokens(p.begin(), p.begin() + (i + 1) * bs));
      if (it == by_key.end()) break;
      take(it->second);
      s.blocks.push_back(it->second);
    }
    s.n_committed = static_cast<int64_t>(s.blocks.size()) * bs;
    hit += s.n_committed;
    return s.n_committed;
  }

  bool reserve(Seq& s, int64_t n) {
    const int64_t need = (n + bs - 1) / bs - static_cast<int64_t>(s.blocks.size());
    if (need <= 0) return true;
    if (need > n_blocks - used) return false;
    for (int64_t i = 0; i < need; ++i) {
      int r;
      if (!free_ids.empty()) {
        r = free_ids.back();
        free_ids.pop_back();
      } else {
        r = lru.front();
        lru.pop_front();
        refcount[r] = 1;
        drop_extending(key[r]);
        ++evictions;
      }
      refcount[r] = 1;
      ++used;
      s.blocks.push_back(r);
    }
    return true;
  }

  void commit(Seq& s, const Tokens& t, int64_t n) {
    for (int64_t i = s.n_committed / bs; i < n / bs; ++i) {
      if (!on) continue;
      Tokens k(t.begin(), t.begin() + (i + 1) * bs);
      if (i > 0 && !by_key.count(Tokens(t.begin(), t.begin() + i * bs))) continue;
      if (by_key.count(k)) continue;
      const int r = s.blocks[i];
      reg[r] = 1;
      key[r] = k;
      by_key[k] = r;
    }
    s.n_committed = std::max(s.n_committed, n / bs * bs);
  }

  void release(Seq& s) {
    for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) {
      if (--refcount[*it] > 0) continue;
      --used;
      if (reg[*it]) lru.push_back(*it); else free_ids.push_back(*it);
    }
    s = Seq{};
  }

  void clear() {
    for (int r = 0; r < n_blocks; ++r) {
      if (reg[r]) unregister(r);
    }
  }
};

struct LiveSeq {
  Tokens tokens;
  int64_t n_computed = 0;
  SeqBlocks blocks;
  RefModel::Seq ref;
};

void run_random(int64_t n_blocks, int64_t bs, bool on, uint64_t hash_mask, uint32_t seed,
                int n_ops) {
  CAPTURE(n_blocks, bs, on, hash_mask, seed);
  BlockManager m(n_blocks, bs, on);
  BlockManagerTestPeer::set_hash_mask(m, hash_mask);
  RefModel ref(n_blocks, bs, on);
  std::mt19937 rng(seed);
  auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  // Ground truth for K/V: the token prefix each physical block was last written for.
  std::vector<Tokens> written(n_blocks);
  std::vector<LiveSeq> seqs;
  // A few shared stems over a 3-token alphabet, so prompts share and collide a lot.
  std::vector<Tokens> stems(3);
  for (auto& s : stems) {
    for (int i = 0; i < 40; ++i) s.push_back(rnd(0, 2));
  }

  auto holders = [&](int32_t b) {
    int n = 0;
    for (auto& s : seqs) n += static_cast<int>(std::count(s.blocks.blocks.begin(),
                                                          s.blocks.blocks.end(), b));
    return n;
  };

  auto check_invariants = [&]() {
    std::map<int32_t, int> impl_to_ref;
    std::map<int, int32_t> ref_to_impl;
    for (auto& s : seqs) {
      REQUIRE(s.blocks.blocks.size() == s.ref.blocks.size());
      REQUIRE(s.blocks.n_committed == s.ref.n_committed);
      REQUIRE(static_cast<int64_t>(s.blocks.hashes.size()) * bs == s.blocks.n_committed);
      std::set<int32_t> own(s.blocks.blocks.begin(), s.blocks.blocks.end());
      REQUIRE(own.size() == s.blocks.blocks.size());  // never twice in one sequence
      for (size_t i = 0; i < s.blocks.blocks.size(); ++i) {
        const int32_t b = s.blocks.blocks[i];
        REQUIRE(b >= 0);
        REQUIRE(b < n_blocks);
        auto [it1, new1] = impl_to_ref.emplace(b, s.ref.blocks[i]);
        auto [it2, new2] = ref_to_impl.emplace(s.ref.blocks[i], b);
        REQUIRE(it1->second == s.ref.blocks[i]);  // same sharing structure as the reference
        REQUIRE(it2->second == b);
      }
    }
    for (auto& [b, r] : impl_to_ref) REQUIRE(holders(b) == ref.refcount[r]);
    const auto st = m.stats();
    REQUIRE(st.used_blocks == static_cast<int64_t>(impl_to_ref.size()));
    REQUIRE(st.used_blocks == ref.used);
    REQUIRE(st.cached_blocks == static_cast<int64_t>(ref.lru.size()));
    REQUIRE(static_cast<int64_t>(ref.free_ids.size()) + st.cached_blocks + st.used_blocks ==
            n_blocks);
    REQUIRE(m.num_available() == n_blocks - st.used_blocks);
    REQUIRE(m.usage() == Approx(static_cast<double>(st.used_blocks) / n_blocks));
    REQUIRE(st.evictions == ref.evictions);
    REQUIRE(st.prefix_query_tokens == ref.query);
    REQUIRE(st.prefix_hit_tokens == ref.hit);
  };

  for (int op = 0; op < n_ops; ++op) {
    const int kind = rnd(0, 99);
    if (kind < 25 && seqs.size() < 12) {  // admit a new sequence
      LiveSeq s;
      const Tokens& stem = stems[rnd(0, 2)];
      s.tokens.assign(stem.begin(), stem.begin() + rnd(0, 30));
      for (int i = rnd(1, 8); i > 0; --i) s.tokens.push_back(rnd(0, 2));
      const int64_t hit = m.match_prefix(s.tokens, s.blocks);
      REQUIRE(hit == ref.match(s.tokens, s.ref));
      REQUIRE(hit < static_cast<int64_t>(s.tokens.size()));
      for (size_t i = 0; i < s.blocks.blocks.size(); ++i) {  // the K/V handed out is right
        const Tokens want(s.tokens.begin(), s.tokens.begin() + (i + 1) * bs);
        REQUIRE(written[s.blocks.blocks[i]] == want);
      }
      s.n_computed = hit;
      seqs.push_back(std::move(s));
    } else if (kind < 85 && !seqs.empty()) {  // one engine step for one sequence
      LiveSeq& s = seqs[rnd(0, static_cast<int>(seqs.size()) - 1)];
      if (s.n_computed == static_cast<int64_t>(s.tokens.size())) s.tokens.push_back(rnd(0, 2));
      const int64_t target = std::min<int64_t>(s.n_computed + rnd(1, static_cast<int>(2 * bs + 3)),
                                               static_cast<int64_t>(s.tokens.size()));
      const bool ok = m.reserve(s.blocks, target);
      REQUIRE(ok == ref.reserve(s.ref, target));
      if (ok) {
        for (int64_t t = s.n_computed; t < target; ++t) {
          const int32_t b = s.blocks.blocks[t / bs];
          REQUIRE(holders(b) == 1);  // written blocks are never shared
          const int64_t end = std::min<int64_t>(target, (t / bs + 1) * bs);
          written[b].assign(s.tokens.begin(), s.tokens.begin() + end);
        }
        s.n_computed = target;
        m.commit(s.blocks, s.tokens, target);
        ref.commit(s.ref, s.tokens, target);
      }
    } else if (kind < 99 && !seqs.empty()) {  // finish or preempt
      const size_t i = static_cast<size_t>(rnd(0, static_cast<int>(seqs.size()) - 1));
      m.release(seqs[i].blocks);
      ref.release(seqs[i].ref);
      REQUIRE(seqs[i].blocks.blocks.empty());
      seqs.erase(seqs.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (kind == 99) {
      m.clear_prefix_cache();
      ref.clear();
    }
    check_invariants();
  }
  for (auto& s : seqs) {
    m.release(s.blocks);
    ref.release(s.ref);
  }
  seqs.clear();
  check_invariants();
  REQUIRE(m.stats().used_blocks == 0);
  REQUIRE(m.num_available() == n_blocks);
}

}  // namespace

TEST_CASE("randomized operations match the reference model") {
  const uint64_t kFullHash = ~0ULL;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    run_random(24, 4, true, kFullHash, seed, 4000);
    run_random(9, 1, true, kFullHash, seed + 10, 2000);
    run_random(40, 3, true, kFullHash, seed + 20, 3000);
    run_random(24, 4, false, kFullHash, seed + 30, 2000);
  }
}

TEST_CASE("randomized operations stay exact when most hashes collide") {
  // 2 hash bits: distinct blocks share hashes all the time; tokens and parents must decide.
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    run_random(24, 4, true, 3, seed + 40, 4000);
    run_random(30, 2, true, 0, seed + 50, 3000);
  }
}
