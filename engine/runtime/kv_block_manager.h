// Paged KV cache bookkeeping: which physical blocks of the shared K/V pools each sequence owns,
// and the prefix cache that lets sequences share full blocks of identical token prefixes.
//
// The pools themselves (per layer [num_blocks, block_size, kv_dim]) live in the Engine; this
// class only hands out block ids. Sequence token t lives in block seq.blocks[t / block_size] at
// row t % block_size.
//
// Prefix cache: when the K/V of a full block (block_size tokens) has been computed, commit()
// registers it under a hash chained over every token id from the sequence start to the block's
// end (hash(parent hash, block tokens)), so two blocks with the same hash hold the same K/V. A
// later sequence whose prompt starts with the same tokens takes those blocks by reference count
// (match_prefix) instead of recomputing them. A block whose reference count drops to 0 stays in
// the cache, evictable: allocation takes never-used/free blocks first, then evicts the least
// recently released cached block. The token ids of cached blocks are kept and compared on a hit,
// so a hash collision can never hand out wrong K/V.
//
// Not thread-safe: owned and called by the engine loop only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace sampan::runtime {

// One sequence's view of the cache. Owned by the scheduler's sequence state; only
// BlockManager changes it.
struct SeqBlocks {
  std::vector<int32_t> blocks;   // physical block ids, in sequence order
  std::vector<uint64_t> hashes;  // chain hash of each committed full block (prefix of blocks)
  int64_t n_committed = 0;       // tokens covered by committed (hashed) full blocks
  // Which K/V the tokens produce: blocks are shared only between sequences of one namespace.
  // The engine sets the LoRA adapter index + 1 (0: the base model), since an adapter changes
  // the K/V of the same tokens. Set before the first match_prefix / commit.
  int32_t ns = 0;
};

struct BlockManagerStats {
  int64_t num_blocks = 0;
  int64_t used_blocks = 0;        // referenced by at least one sequence
  int64_t cached_blocks = 0;      // reference count 0 but holding reusable prefix K/V
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up by match_prefix (cumulative)
  int64_t prefix_hit_tokens = 0;    // of those, tokens served from the cache (cumulative)
  int64_t evictions = 0;            // cached blocks reused for new data (cumulative)
};

class BlockManager {
 public:
  // Throws Error(kInvalidArgument) when num_blocks < 1 or block_size < 1.
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  // Blocks reserve() can still hand out: free ones plus evictable cached ones.
  int64_t num_available() const;
  // Blocks needed to hold n_tokens tokens: ceil(n_tokens / block_size).
  int64_t blocks_for(int64_t n_tokens) const;
  // used_blocks / num_blocks, in [0, 1].
  double usage() const;
  BlockManagerStats stats() const;

  // For a sequence with no blocks yet: takes the longest chain of cached full blocks that
  // matches the start of `prompt`, but never all of it: at most prompt.size() - 1 tokens, so
  // that the last prompt token is always computed (its logits are needed). Returns the number of
  // tokens covered (a multiple of block_size; 0 when prefix caching is off). Counts
  // prompt.size() query tokens and the returned number as hit tokens.
  int64_t match_prefix(std::span<const int32_t> prompt, SeqBlocks& seq);

  // Makes seq hold enough blocks for n_tokens tokens in total. All or nothing: returns false
  // and changes nothing when not enough blocks are available.
  bool reserve(SeqBlocks& seq, int64_t n_tokens);

  // Declares that the K/V of tokens[0 .. n_computed) of seq are written. Every full block in
  // that range not yet committed is hashed and registered in the prefix cache (when enabled).
  // `tokens` is the sequence's whole token list so far (prompt + generated), at least n_computed.
  void commit(SeqBlocks& seq, std::span<const int32_t> tokens, int64_t n_computed);

  // Drops seq's references (seq becomes empty). Committed blocks with no other reference stay
  // cached (most recently released are evicted last); uncommitted ones become free.
  void release(SeqBlocks& seq);

  // Empties the prefix cache (blocks still referenced keep working but are no longer shared).
  void clear_prefix_cache();

  ~BlockManager();
  BlockManager(BlockManager&&) noexcept;
  BlockManager& operator=(BlockManager&&) noexcept;

 private:
  // Free list, reference counts, hash -> block map, LRU of cached blocks, per-block tokens.
  struct Impl;
  // Unit tests force hash collisions through it (kv_block_manager.cc defines it).
  friend struct BlockManagerTestPeer;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
  bool prefix_caching_ = false;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::runtime
