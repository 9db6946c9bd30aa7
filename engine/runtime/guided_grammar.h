// vLLM's guided decoding of raw text, compiled to byte grammars (grammar.h) like a JSON Schema
// (json_schema.h): guided_choice (the output is one of the given strings) and guided_regex (the
// output is a whole match of a regular expression). The texts are the output itself: nothing is
// quoted or escaped, and decoding ends (the end-of-sequence ids become the only choice) when no
// byte may follow.
//
// What a caller may rely on: every complete text of a choice grammar is exactly one of the
// choices (a trie, so any number of choices sharing prefixes is followed as one alternative); of
// a regex grammar, a text the whole pattern matches in the dialect string_pattern.h describes
// (the intersection of Python's re and ECMA-262). Errors are Error(kInvalidArgument) naming
// `field`: an empty list, too many choices or bytes, a pattern string_pattern.h refuses (with
// its byte offset), a pattern that matches nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/grammar.h"

namespace sampan::runtime {

struct GuidedLimits {
  static constexpr size_t kMaxChoices = 4096;
  // Bytes of all choices together: each byte of a choice not shared with an earlier one is a
  // rule of the trie, within Grammar::kMaxRules.
  static constexpr size_t kMaxChoiceBytes = 60000;
};

std::shared_ptr<const Grammar> compile_choice_grammar(const std::vector<std::string>& choices,
                                                      const std::string& field);
std::shared_ptr<const Grammar> compile_regex_grammar(std::string_view pattern,
                                                     const std::string& field);

}  // namespace sampan::runtime
