// The models that turn one pre-tokenized word into ids: BPE by merge rank (HF) or by merged-token
// score (SentencePiece vocabularies from GGUF), and greedy longest-match WordPiece.
#include <queue>

#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"

namespace sampan::tok {
namespace {

struct Symbol {
  int32_t id;
  int prev, next;
  size_t begin, len;  // bytes of the word this symbol covers
};

struct Candidate {
  double priority;  // lower merges first
  int left;
  int32_t left_id, right_id;
  bool operator>(const Candidate& o) const {
    return priority != o.priority ? priority > o.priority : left > o.left;
  }
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

void push_unknown(const ModelSpec& m, std::string_view bytes, std::vector<Symbol>& syms, size_t begin,
                  bool& last_unk) {
  if (m.byte_fallback) {
    bool all = true;
    for (char c : bytes) all = all && m.byte_ids[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (size_t k = 0; k < bytes.size(); ++k) {
        syms.push_back({m.byte_ids[static_cast<uint8_t>(bytes[k])], 0, 0, begin + k, 1});
      }
      last_unk = false;
      return;
    }
  }
  if (!m.unk) return;  // HF drops characters it can neither find nor map to <unk>
  if (m.fuse_unk && last_unk) {
    syms.back().len += bytes.size();
    return;
  }
  syms.push_back({*m.unk, 0, 0, begin, bytes.size()});
  last_unk = true;
}

// Finds the merge of (a, b): its priority and result id, or false.
bool lookup_merge(const ModelSpec& m, std::string_view word, const Symbol& a, const Symbol& b,
                  double& priority, int32_t& result) {
  if (m.type == ModelSpec::Type::kBpe) {
    auto it = m.merges.find(pair_key(a.id, b.id));
    if (it == m.merges.end()) return false;
    priority = it->second.first;
    result = it->second.second;
    return true;
  }
  // SentencePiece: merge when the concatenation is a token; the higher its score, the sooner.
  auto it = m.ids.find(std::string(word.substr(a.begin, a.len + b.len)));
  if (it == m.ids.end()) return false;
  priority = -static_cast<double>(m.scores[it->second]);
  result = it->second;
  return true;
}

void bpe_encode(const ModelSpec& m, std::string_view word, std::vector<int32_t>& out) {
  if (m.ignore_merges) {
    auto it = m.ids.find(std::string(word));
    if (it != m.ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> syms;
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t b = i;
    unicode::next_code_point(word, i);
    const std::string_view ch = word.substr(b, i - b);
    auto it = m.ids.find(std::string(ch));
    if (it != m.ids.end()) {
      syms.push_back({it->second, 0, 0, b, ch.size()});
      last_unk = false;
    } else {
      push_unknown(m, ch, syms, b, last_unk);
    }
  }
  const int n = static_cast<int>(syms.size());
  for (int k = 0; k < n; ++k) {
    syms[k].prev = k - 1;
    syms[k].next = k + 1 < n ? k + 1 : -1;
  }
  // Lazy-deletion heap: stale candidates are recognised by their ids no longer matching.
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int left) {
    if (left < 0 || syms[left].next < 0) return;
    const Symbol& a = syms[left];
    const Symbol& b = syms[a.next];
    double pr;
    int32_t res;
    if (lookup_merge(m, word, a, b, pr, res)) heap.push({pr, left, a.id, b.id});
  };
  for (int k = 0; k + 1 < n; ++k) consider(k);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& a = syms[c.left];
    if (a.len == 0 || a.id != c.left_id || a.next < 0) continue;
    Symbol& b = syms[a.next];
    if (b.id != c.right_id) continue;
    double pr;
    int32_t res;
    lookup_merge(m, word, a, b, pr, res);
    a.id = res;
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (b.next >= 0) syms[b.next].prev = c.left;
    consider(a.prev);
    consider(c.left);
  }
  for (int k = n > 0 ? 0 : -1; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

void wordpiece_encode(const ModelSpec& m, std::string_view word, std::vector<int32_t>& out) {
  size_t n_chars = 0;
  for (size_t i = 0; i < word.size();) {
    unicode::next_code_point(word, i);
    ++n_chars;
  }
  if (n_chars > m.wp_max_chars) {
    if (m.unk) out.push_back(*m.unk);
    return;
  }
  std::vector<int32_t> pieces;
  size_t start = 0;
  std::string key;
  while (start < word.size()) {
    size_t end = word.size();
    int32_t found = -1;
    while (end > start) {
      key.assign(start > 0 ? m.wp_prefix : "");
      key.append(word.substr(start, end - start));
      auto it = m.ids.find(key);
      if (it != m.ids.end()) {
        found = it->second;
        break;
      }
      // step back one whole character
      do --end; while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      if (m.unk) out.push_back(*m.unk);
      return;
    }
    pieces.push_back(found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace

void model_encode(const ModelSpec& m, std::string_view word, std::vector<int32_t>& out) {
  switch (m.type) {
    case ModelSpec::Type::kBpe:
    case ModelSpec::Type::kSpmScores:
      bpe_encode(m, word, out);
      return;
    case ModelSpec::Type::kWordPiece:
      wordpiece_encode(m, word, out);
      return;
  }
}

}  // namespace sampan::tok
