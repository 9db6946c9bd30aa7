// Normalizers, pre-tokenizers and decoders, each step as HF `tokenizers` defines it.
#include <algorithm>

#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/unicode_norm.h"

namespace sampan::tok {

Regex::Regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE off = 0;
  // MATCH_INVALID_UTF: text from callers may hold invalid UTF-8; it must not abort matching.
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail(ErrorCode::kUnsupported, "{}: regex at offset {} cannot be compiled: {}", where, off,
         reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s, bool keep_empty) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  size_t pos = 0;
  uint32_t options = 0;
  while (pos <= s.size()) {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, options, md,
                               nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {
      if (keep_empty) {
        out.emplace_back(ov[0], ov[0]);
        pos = ov[0];
        options = PCRE2_NOTEMPTY_ATSTART;  // the next match starting here must not be empty
        continue;
      }
      // empty match: step one character and retry
      pos = ov[0] + 1;
      while (pos < s.size() && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    out.emplace_back(ov[0], ov[1]);
    pos = ov[1];
    options = 0;
  }
  pcre2_match_data_free(md);
  return out;
}

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t i = 0;
  while (true) {
    const size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i).append(to);
    i = j + from.size();
  }
  out.append(s, i, std::string::npos);
  s = std::move(out);
}

std::string bert_normalize(const NormalizerStep& n, std::string_view text) {
  std::u32string cps;
  for (size_t i = 0; i < text.size();) {
    const char32_t c = unicode::next_code_point(text, i);
    if (n.clean_text) {
      if (c == 0 || c == 0xFFFD) continue;
      if (c != '\t' && c != '\n' && c != '\r' && unicode::is_other(c)) continue;
      if (c == '\t' || c == '\n' || c == '\r' || unicode::is_whitespace(c)) {
        cps.push_back(' ');
        continue;
      }
    }
    if (n.chinese_chars && unicode::is_chinese_char(c)) {
      cps.push_back(' ');
      cps.push_back(c);
      cps.push_back(' ');
      continue;
    }
    cps.push_back(c);
  }
  std::u32string tmp;
  if (n.strip_accents) {
    for (char32_t c : cps) unicode::append_strip_accents(c, tmp);
    cps.swap(tmp);
    tmp.clear();
  }
  if (n.lowercase) {
    for (char32_t c : cps) unicode::append_lower(c, tmp);
    cps.swap(tmp);
  }
  std::string out;
  for (char32_t c : cps) unicode::append_utf8(out, c);
  return out;
}

// Splits `s` by the given match ranges according to `behavior`.
void split_by(std::string_view s, std::vector<std::pair<size_t, size_t>> matches,
              SplitBehavior behavior, bool invert, std::vector<std::string>& out) {
  struct Part {
    size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  size_t pos = 0;
  for (auto [b, e] : matches) {
    if (b > pos) parts.push_back({pos, b, invert});
    parts.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < s.size()) parts.push_back({pos, s.size(), invert});
  std::vector<std::string> res;
  bool merge_next = false;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Part& p = parts[k];
    std::string piece(s.substr(p.b, p.e - p.b));
    switch (behavior) {
      case SplitBehavior::kIsolated:
        res.push_back(std::move(piece));
        break;
      case SplitBehavior::kRemoved:
        if (!p.match) res.push_back(std::move(piece));
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (p.match && !res.empty() && !parts.empty() && k > 0 && !parts[k - 1].match) {
          res.back() += piece;
        } else {
          res.push_back(std::move(piece));
        }
        break;
      case SplitBehavior::kMergedWithNext:
        if (merge_next) {
          res.back() += piece;
        } else {
          res.push_back(std::move(piece));
        }
        merge_next = p.match;
        break;
      case SplitBehavior::kContiguous:
        if (p.match && k > 0 && parts[k - 1].match) {
          res.back() += piece;
        } else {
          res.push_back(std::move(piece));
        }
        break;
    }
  }
  for (auto& r : res) out.push_back(std::move(r));
}

// Matches per character class, for Digits / Punctuation / Bert splitting.
template <typename Pred>
std::vector<std::pair<size_t, size_t>> char_matches(std::string_view s, Pred pred) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    const char32_t c = unicode::next_code_point(s, i);
    if (pred(c)) m.emplace_back(b, i);
  }
  return m;
}

bool is_bert_punct(char32_t c) {
  return (c < 0x80 && std::ispunct(static_cast<int>(c))) || unicode::is_punctuation(c);
}

// Digits: Rust's char::is_numeric covers Nd, Nl and No; these tables only know the ASCII digits
// and Latin-1's superscripts and fractions (the characters byte-level mapping can produce).
bool is_numeric(char32_t c) {
  return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE);
}

std::string byte_level_map(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (char ch : s) unicode::append_utf8(out, unicode::byte_to_char(static_cast<uint8_t>(ch)));
  return out;
}

void apply_step(const PreTokenizerStep& st, std::string_view s, bool at_start,
                std::vector<std::string>& out) {
  using K = PreTokenizerStep::Kind;
  switch (st.kind) {
    case K::kSplit:
      split_by(s, st.regex->find_all(s, /*keep_empty=*/true), st.behavior, st.invert, out);
      return;
    case K::kByteLevel: {
      std::string t(s);
      if (st.add_prefix_space && !t.empty() && t[0] != ' ') t.insert(t.begin(), ' ');
      std::vector<std::string> parts;
      if (st.regex) {
        split_by(t, st.regex->find_all(t), SplitBehavior::kIsolated, false, parts);
      } else {
        parts.push_back(t);
      }
      for (auto& p : parts) out.push_back(byte_level_map(p));
      return;
    }
    case K::kMetaspace: {
      std::string t(s);
      replace_all(t, " ", st.replacement);
      const bool prepend = st.prepend_scheme == "always" || (st.prepend_scheme == "first" && at_start);
      if (prepend && t.compare(0, st.replacement.size(), st.replacement) != 0) t = st.replacement + t;
      if (!st.split) {
        out.push_back(std::move(t));
        return;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t i = t.find(st.replacement); i != std::string::npos;
           i = t.find(st.replacement, i + st.replacement.size())) {
        m.emplace_back(i, i + st.replacement.size());
      }
      split_by(t, m, SplitBehavior::kMergedWithNext, false, out);
      return;
    }
    case K::kDigits: {
      auto m = char_matches(s, is_numeric);
      split_by(s, m, st.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
               false, out);
      return;
    }
    case K::kPunctuation:
      split_by(s, char_matches(s, is_bert_punct), st.behavior, false, out);
      return;
    case K::kBert: {
      std::vector<std::string> words;
      split_by(s, char_matches(s, unicode::is_whitespace), SplitBehavior::kRemoved, false, words);
      for (auto& w : words) split_by(w, char_matches(w, is_bert_punct), SplitBehavior::kIsolated, false, out);
      return;
    }
    case K::kWhitespace:
      split_by(s, st.regex->find_all(s), SplitBehavior::kIsolated, false, out);
      // keep only the matches (\w+|[^\w\s]+): drop whitespace pieces
      out.erase(std::remove_if(out.begin(), out.end(),
                               [](const std::string& p) {
                                 size_t i = 0;
                                 while (i < p.size()) {
                                   if (!unicode::is_whitespace(unicode::next_code_point(p, i))) return false;
                                 }
                                 return true;
                               }),
                out.end());
      return;
  }
}

}  // namespace

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string s(text);
  for (const auto& n : steps) {
    using K = NormalizerStep::Kind;
    switch (n.kind) {
      case K::kPrepend:
        if (!s.empty()) s = n.a + s;
        break;
      case K::kReplace:
        replace_all(s, n.a, n.b);
        break;
      case K::kBert:
        s = bert_normalize(n, s);
        break;
      case K::kLowercase: {
        std::u32string t;
        for (size_t i = 0; i < s.size();) unicode::append_lower(unicode::next_code_point(s, i), t);
        s.clear();
        for (char32_t c : t) unicode::append_utf8(s, c);
        break;
      }
      case K::kStrip: {
        size_t b = 0, e = s.size();
        while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\n' || s[b] == '\r')) ++b;
        while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\n' || s[e - 1] == '\r')) --e;
        s = s.substr(b, e - b);
        break;
      }
      case K::kUnicodeNorm: {
        unicode::NormForm form = unicode::NormForm::kNfc;
        unicode::parse_norm_form(n.a.empty() ? "NFC" : n.a, form);
        s = unicode::normalize(form, std::string_view(s));
        break;
      }
    }
  }
  return s;
}

std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string text,
                                      bool at_start) {
  std::vector<std::string> pieces{std::move(text)};
  for (const auto& st : steps) {
    std::vector<std::string> next;
    for (size_t i = 0; i < pieces.size(); ++i) apply_step(st, pieces[i], at_start && i == 0, next);
    pieces.swap(next);
  }
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const std::string& p) { return p.empty(); }),
               pieces.end());
  return pieces;
}

std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  using K = DecoderStep::Kind;
  for (const auto& d : steps) {
    switch (d.kind) {
      case K::kReplace:
        for (auto& t : tokens) replace_all(t, d.a, d.b);
        break;
      case K::kByteFallback: {
        std::vector<std::string> next;
        bool prev_byte = false;  // the last element of `next` is a run of fallback bytes
        for (auto& t : tokens) {
          const bool is_byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                               std::isxdigit(static_cast<uint8_t>(t[3])) &&
                               std::isxdigit(static_cast<uint8_t>(t[4]));
          if (is_byte) {
            const char b = static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
            if (prev_byte) {
              next.back().push_back(b);
            } else {
              next.emplace_back(1, b);
            }
          } else {
            next.push_back(std::move(t));
          }
          prev_byte = is_byte;
        }
        tokens.swap(next);
        break;
      }
      case K::kFuse: {
        std::string all;
        for (auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case K::kStrip:
        for (auto& t : tokens) {
          int n = 0;
          size_t b = 0;
          while (n < d.start && b < t.size() && t[b] == d.strip_char) ++b, ++n;
          size_t e = t.size();
          n = 0;
          while (n < d.stop && e > b && t[e - 1] == d.strip_char) --e, ++n;
          t = t.substr(b, e - b);
        }
        break;
      case K::kByteLevel:
        for (auto& t : tokens) {
          std::string bytes;
          for (size_t i = 0; i < t.size();) {
            const size_t b = i;
            const int v = unicode::char_to_byte(unicode::next_code_point(t, i));
            if (v >= 0) {
              bytes.push_back(static_cast<char>(v));
            } else {
              bytes.append(t, b, i - b);
            }
          }
          t = std::move(bytes);
        }
        break;
      case K::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], d.a, " ");
          if (i == 0 && d.prepend_scheme != "never" && !tokens[i].empty() && tokens[i][0] == ' ') {
            tokens[i].erase(tokens[i].begin());
          }
        }
        break;
      case K::kWordPiece:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          if (i != 0) {
            if (t.compare(0, d.a.size(), d.a) == 0) {
              t.erase(0, d.a.size());
            } else {
              t.insert(t.begin(), ' ');
            }
          }
          if (d.cleanup) {
            for (auto [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","},
                                    {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
                                    {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"},
                                    {" 're", "'re"}}) {
              replace_all(t, from, to);
            }
          }
        }
        break;
    }
  }
  std::string out;
  for (auto& t : tokens) out += t;
  return out;
}

}  // namespace sampan::tok
