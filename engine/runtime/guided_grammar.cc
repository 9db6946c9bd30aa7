#include "engine/runtime/guided_grammar.h"

#include <cstdint>
#include <map>
#include <utility>

#include "engine/core/error.h"
#include "engine/runtime/string_pattern.h"

namespace sampan::runtime {
namespace {

// Lays the grammar out and refuses one that derives no text (a pattern such as "a^b").
std::shared_ptr<const Grammar> finish(std::shared_ptr<Grammar> g, const std::string& field) {
  try {
    g->finalize();
  } catch (const Error& e) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}': {}", field, e.what());
  }
  if (GrammarMatcher(*g).start().empty()) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}': admits no text that can be generated",
               field);
  }
  return g;
}

}  // namespace

std::shared_ptr<const Grammar> compile_choice_grammar(const std::vector<std::string>& choices,
                                                      const std::string& field) {
  if (choices.empty()) fail_field(ErrorCode::kInvalidArgument, field, "'{}' is empty", field);
  if (choices.size() > GuidedLimits::kMaxChoices) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}' holds {} choices, more than {}", field,
               choices.size(), GuidedLimits::kMaxChoices);
  }
  size_t bytes = 0;
  for (const std::string& c : choices) bytes += c.size();
  if (bytes > GuidedLimits::kMaxChoiceBytes) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}' holds {} bytes, more than {}", field,
               bytes, GuidedLimits::kMaxChoiceBytes);
  }
  // A trie: node n's children by byte, and whether a choice ends at n. Each node becomes a rule
  // with one alternative per child (its byte, then the child's rule) and an empty one where a
  // choice ends, so the recogniser follows a single stack whatever the number of choices.
  struct Node {
    std::map<uint8_t, uint32_t> next;
    bool end = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& c : choices) {
    uint32_t n = 0;
    for (const char ch : c) {
      const auto b = static_cast<uint8_t>(ch);
      const auto it = trie[n].next.find(b);
      if (it != trie[n].next.end()) {
        n = it->second;
        continue;
      }
      const auto id = static_cast<uint32_t>(trie.size());
      trie[n].next.emplace(b, id);
      trie.emplace_back();
      n = id;
    }
    trie[n].end = true;
  }
  auto g = std::make_shared<Grammar>();
  for (size_t n = 0; n < trie.size(); ++n) g->add_rule();  // rule n for node n; 0 the root
  for (size_t n = 0; n < trie.size(); ++n) {
    const auto r = static_cast<uint32_t>(n);
    if (trie[n].end) g->add_alt(r, {});
    for (const auto& [b, child] : trie[n].next) {
      g->add_alt(r, {g->byte(b), Grammar::rule_symbol(child)});
    }
  }
  return finish(std::move(g), field);
}

std::shared_ptr<const Grammar> compile_regex_grammar(std::string_view pattern,
                                                     const std::string& field) {
  auto g = std::make_shared<Grammar>();
  try {
    g->set_root(add_raw_pattern(*g, pattern, [&g] {
      if (g->rule_count() >= Grammar::kMaxRules) {
        throw PatternError(
            fmt::format("pattern needs more than {} grammar rules", Grammar::kMaxRules));
      }
      return g->add_rule();
    }));
  } catch (const PatternError& e) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}': {}", field, e.what());
  }
  return finish(std::move(g), field);
}

}  // namespace sampan::runtime
