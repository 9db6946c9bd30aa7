#include "engine/runtime/kv_block_manager.h"

#include <algorithm>
#include <unordered_map>

#include "engine/core/error.h"

// Cache rules (the unit test's reference model states the same rules on full token prefixes):
//  - a full block is registered only when its parent block's content is registered too, so the
//    registered blocks form a forest and every registered block's parent is registered;
//  - unregistering a block (eviction, clear) unregisters its whole registered subtree, because a
//    child whose parent is gone can never be reached by a prefix walk again;
//  - a hit checks the block's own tokens and that its parent is the block matched one step
//    earlier, so equal hashes alone (even colliding chains) never hand out a block.

namespace sampan::runtime {

namespace {

constexpr uint64_t kRootHash = 0x53414d50414e4b56ULL;
constexpr int32_t kNone = -1;

// splitmix64 finalizer: a bijection with full avalanche, so chained per-token mixing spreads
// every token id over all 64 bits.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

struct BlockManager::Impl {
  int64_t block_size = 0;
  uint64_t hash_mask = ~0ULL;  // tests narrow it to force collisions

  std::vector<int32_t> refcount;      // [num_blocks] live sequences holding the block
  std::vector<uint8_t> registered;    // [num_blocks] in by_hash (cached or shared)
  std::vector<uint64_t> block_hash;   // [num_blocks] chain hash, valid when registered
  std::vector<int32_t> parent;        // [num_blocks] registered parent block or kNone
  std::vector<int32_t> block_ns;      // [num_blocks] SeqBlocks::ns of its chain, valid when registered
  std::vector<std::vector<int32_t>> children;  // [num_blocks] registered child blocks
  std::vector<int32_t> tokens;        // [num_blocks, block_size] valid when registered
  std::vector<int32_t> free_list;     // stack of unregistered blocks with refcount 0
  // LRU of cached blocks (registered, refcount 0): intrusive list, head evicted first.
  std::vector<int32_t> lru_prev, lru_next;
  int32_t lru_head = kNone, lru_tail = kNone;
  std::unordered_multimap<uint64_t, int32_t> by_hash;

  int64_t used = 0;
  int64_t cached = 0;
  int64_t query_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t evictions = 0;

  explicit Impl(int64_t num_blocks, int64_t bs)
      : block_size(bs),
        refcount(num_blocks, 0),
        registered(num_blocks, 0),
        block_hash(num_blocks, 0),
        parent(num_blocks, kNone),
        block_ns(num_blocks, 0),
        children(num_blocks),
        tokens(static_cast<size_t>(num_blocks * bs), 0),
        lru_prev(num_blocks, kNone),
        lru_next(num_blocks, kNone) {
    // Reversed so that block 0 is handed out first (easier to read in logs).
    free_list.reserve(num_blocks);
    for (int64_t b = num_blocks - 1; b >= 0; --b) free_list.push_back(static_cast<int32_t>(b));
  }

  uint64_t chain_hash(uint64_t parent_hash, std::span<const int32_t> toks) const {
    uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ULL);
    for (int32_t t : toks) h = mix64(h + static_cast<uint32_t>(t));
    return h & hash_mask;
  }

  void lru_push_back(int32_t b) {
    lru_prev[b] = lru_tail;
    lru_next[b] = kNone;
    if (lru_tail != kNone) lru_next[lru_tail] = b; else lru_head = b;
    lru_tail = b;
    ++cached;
  }

  void lru_remove(int32_t b) {
    if (lru_prev[b] != kNone) lru_next[lru_prev[b]] = lru_next[b]; else lru_head = lru_next[b];
    if (lru_next[b] != kNone) lru_prev[lru_next[b]] = lru_prev[b]; else lru_tail = lru_prev[b];
    lru_prev[b] = lru_next[b] = kNone;
    --cached;
  }

  bool same_tokens(int32_t b, std::span<const int32_t> toks) const {
    return std::equal(toks.begin(), toks.end(), tokens.begin() + b * block_size);
  }

  // The root of a namespace's hash chains.
  static uint64_t root_hash(int32_t ns) {
    return ns == 0 ? kRootHash : mix64(kRootHash + static_cast<uint32_t>(ns));
  }

  // The registered block of namespace `ns` holding `toks` under registered parent
  // `parent_block`, or kNone.
  int32_t find(uint64_t h, int32_t parent_block, std::span<const int32_t> toks, int32_t ns) const {
    auto [lo, hi] = by_hash.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      int32_t b = it->second;
      if (parent[b] == parent_block && block_ns[b] == ns && same_tokens(b, toks)) return b;
    }
    return kNone;
  }

  void register_block(int32_t b, uint64_t h, int32_t parent_block, int32_t ns,
                      std::span<const int32_t> toks) {  // toks: [block_size]
    registered[b] = 1;
    block_hash[b] = h;
    block_ns[b] = ns;
    parent[b] = parent_block;
    std::copy(toks.begin(), toks.end(), tokens.begin() + b * block_size);
    if (parent_block != kNone) children[parent_block].push_back(b);
    by_hash.emplace(h, b);
  }

  // Unregisters b and its registered subtree; those of them no sequence holds become free.
  void unregister(int32_t b) {
    std::vector<int32_t> kids = std::move(children[b]);
    children[b].clear();
    for (int32_t c : kids) {
      parent[c] = kNone;  // already detached from b: keeps unregister(c) off b's list
      unregister(c);
    }
    if (parent[b] != kNone) {
      auto& siblings = children[parent[b]];
      siblings.erase(std::find(siblings.begin(), siblings.end(), b));
      parent[b] = kNone;
    }
    auto [lo, hi] = by_hash.equal_range(block_hash[b]);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == b) {
        by_hash.erase(it);
        break;
      }
    }
    registered[b] = 0;
    if (refcount[b] == 0) {
      lru_remove(b);
      free_list.push_back(b);
    }
  }

  // A block for new data: a free one, else the least recently released cached one.
  int32_t take_block() {
    int32_t b;
    if (!free_list.empty()) {
      b = free_list.back();
      free_list.pop_back();
      refcount[b] = 1;
    } else {
      b = lru_head;
      lru_remove(b);
      refcount[b] = 1;  // before unregister(), which would otherwise free it
      unregister(b);
      ++evictions;
    }
    ++used;
    return b;
  }

  void add_ref(int32_t b) {
    if (refcount[b] == 0) {
      lru_remove(b);  // only registered blocks are ever shared, so b was cached
      ++used;
    }
    ++refcount[b];
  }

  // The registered block with the same content as seq's block j (tokens[0 .. (j+1)*bs)), or
  // kNone. seq's own block is usually it; a sequence that computed a prefix already cached by a
  // concurrent one holds an unregistered twin, found by walking the chain from the start.
  int32_t registered_twin(const SeqBlocks& seq, std::span<const int32_t> toks, int64_t j) const {
    int32_t own = seq.blocks[j];
    if (registered[own]) return own;
    int32_t b = kNone;
    for (int64_t k = 0; k <= j; ++k) {
      b = find(seq.hashes[k], b, toks.subspan(k * block_size, block_size), seq.ns);
      if (b == kNone) return kNone;
    }
    return b;
  }
};

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
  SAMPAN_CHECK(num_blocks >= 1 && num_blocks <= INT32_MAX, ErrorCode::kInvalidArgument,
               "BlockManager: num_blocks must be in [1, 2^31), got {}", num_blocks);
  SAMPAN_CHECK(block_size >= 1 && block_size <= (1 << 20), ErrorCode::kInvalidArgument,
               "BlockManager: block_size must be in [1, 2^20], got {}", block_size);
  impl_ = std::make_unique<Impl>(num_blocks, block_size);
}

BlockManager::~BlockManager() = default;
BlockManager::BlockManager(BlockManager&&) noexcept = default;
BlockManager& BlockManager::operator=(BlockManager&&) noexcept = default;

int64_t BlockManager::num_available() const { return num_blocks_ - impl_->used; }

int64_t BlockManager::blocks_for(int64_t n_tokens) const {
  return n_tokens <= 0 ? 0 : (n_tokens + block_size_ - 1) / block_size_;
}

double BlockManager::usage() const {
  return static_cast<double>(impl_->used) / static_cast<double>(num_blocks_);
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats s;
  s.num_blocks = num_blocks_;
  s.used_blocks = impl_->used;
  s.cached_blocks = impl_->cached;
  s.prefix_query_tokens = impl_->query_tokens;
  s.prefix_hit_tokens = impl_->hit_tokens;
  s.evictions = impl_->evictions;
  return s;
}

int64_t BlockManager::match_prefix(std::span<const int32_t> prompt, SeqBlocks& seq) {
  SAMPAN_CHECK(seq.blocks.empty() && seq.n_committed == 0, ErrorCode::kInvalidArgument,
               "BlockManager::match_prefix: the sequence already holds {} blocks",
               seq.blocks.size());
  Impl& m = *impl_;
  m.query_tokens += static_cast<int64_t>(prompt.size());
  if (!prefix_caching_ || prompt.empty()) return 0;
  // The last prompt token is always recomputed: its logits are needed.
  const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / block_size_;
  uint64_t h = Impl::root_hash(seq.ns);
  int32_t b = kNone;
  for (int64_t i = 0; i < max_blocks; ++i) {
    auto toks = prompt.subspan(i * block_size_, block_size_);
    h = m.chain_hash(h, toks);
    b = m.find(h, b, toks, seq.ns);
    if (b == kNone) break;
    m.add_ref(b);
    seq.blocks.push_back(b);
    seq.hashes.push_back(h);
  }
  seq.n_committed = static_cast<int64_t>(seq.blocks.size()) * block_size_;
  m.hit_tokens += seq.n_committed;
  return seq.n_committed;
}

bool BlockManager::reserve(SeqBlocks& seq, int64_t n_tokens) {
  SAMPAN_CHECK(n_tokens >= 0, ErrorCode::kInvalidArgument,
               "BlockManager::reserve: n_tokens must be >= 0, got {}", n_tokens);
  const int64_t need = blocks_for(n_tokens) - static_cast<int64_t>(seq.blocks.size());
  if (need <= 0) return true;
  if (need > num_available()) return false;
  for (int64_t i = 0; i < need; ++i) seq.blocks.push_back(impl_->take_block());
  return true;
}

void BlockManager::commit(SeqBlocks& seq, std::span<const int32_t> tokens, int64_t n_computed) {
  SAMPAN_CHECK(n_computed >= 0 && n_computed <= static_cast<int64_t>(tokens.size()) &&
                   n_computed <= static_cast<int64_t>(seq.blocks.size()) * block_size_,
               ErrorCode::kInvalidArgument,
               "BlockManager::commit: n_computed {} exceeds the {} tokens or the {} blocks held",
               n_computed, tokens.size(), seq.blocks.size());
  Impl& m = *impl_;
  const int64_t first = seq.n_committed / block_size_;
  const int64_t last = n_computed / block_size_;
  for (int64_t i = first; i < last; ++i) {
    auto toks = tokens.subspan(i * block_size_, block_size_);
    const uint64_t h = m.chain_hash(i == 0 ? Impl::root_hash(seq.ns) : seq.hashes[i - 1], toks);
    seq.hashes.push_back(h);
    if (!prefix_caching_) continue;
    const int32_t b = seq.blocks[i];
    if (m.registered[b]) continue;  // defensive: blocks past n_committed are fresh
    int32_t parent_block = kNone;
    if (i > 0) {
      parent_block = m.registered_twin(seq, tokens, i - 1);
      if (parent_block == kNone) continue;  // unreachable by a prefix walk: not worth caching
    }
    if (m.find(h, parent_block, toks, seq.ns) != kNone) continue;  // same content is cached already
    m.register_block(b, h, parent_block, seq.ns, toks);
  }
  seq.n_committed = std::max(seq.n_committed, last * block_size_);
}

void BlockManager::release(SeqBlocks& seq) {
  Impl& m = *impl_;
  // Last block first, so the prefix head is the most recent in the LRU and evicted last:
  // evicting a parent would strand its children.
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) {
    const int32_t b = *it;
    if (--m.refcount[b] > 0) continue;
    --m.used;
    if (m.registered[b]) m.lru_push_back(b); else m.free_list.push_back(b);
  }
  seq.blocks.clear();
  seq.hashes.clear();
  seq.n_committed = 0;
}

void BlockManager::clear_prefix_cache() {
  Impl& m = *impl_;
  for (int32_t b = 0; b < static_cast<int32_t>(num_blocks_); ++b) {
    if (m.registered[b] && m.parent[b] == kNone) m.unregister(b);  // roots take their subtrees
  }
}

// Test-only access (tests/unit/test_kv_block_manager.cc declares the same struct).
struct BlockManagerTestPeer {
  static void set_hash_mask(BlockManager& m, uint64_t mask);
};

void BlockManagerTestPeer::set_hash_mask(BlockManager& m, uint64_t mask) {
  m.impl_->hash_mask = mask;
}

}  // namespace sampan::runtime
