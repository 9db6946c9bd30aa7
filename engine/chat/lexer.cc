// Tokenizer with jinja2's lexing rules as transformers configures them (trim_blocks and
// lstrip_blocks on, keep_trailing_newline off).
#include <cstring>

#include "engine/chat/ast.h"
#include "engine/chat/limits.h"
#include "engine/core/error.h"

namespace sampan::chat {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

struct Lexer {
  const std::string& src;
  const std::string& name;
  size_t pos = 0;
  int line = 1;
  size_t line_start = 0;
  std::vector<Token> out;

  int col_of(size_t p) const { return static_cast<int>(p - line_start) + 1; }

  void advance_to(size_t p) {
    for (; pos < p; ++pos) {
      if (src[pos] == '\n') {
        ++line;
        line_start = pos + 1;
      }
    }
  }

  [[noreturn]] void fail_at(size_t p, const std::string& msg) {
    advance_to(p);
    fail(ErrorCode::kInvalidArgument, "{}:{}:{}: {}", name, line, col_of(p), msg);
  }

  void push(TokType t, std::string text, size_t at) {
    advance_to(at);
    out.push_back(Token{t, std::move(text), line, col_of(at)});
  }

  static void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Reads a quoted literal at pos; decodes escapes as Python's unicode-escape codec does.
  size_t lex_string(size_t p) {
    const char q = src[p];
    std::string value;
    size_t k = p + 1;
    for (;;) {
      if (k >= src.size()) fail_at(p, "unexpected end of string literal");
      const char c = src[k];
      if (c == q) break;
      if (c != '\\') {
        value += c;
        ++k;
        continue;
      }
      if (k + 1 >= src.size()) fail_at(p, "unexpected end of string literal");
      const char e = src[k + 1];
      k += 2;
      auto hex = [&](int n) {
        uint32_t cp = 0;
        for (int d = 0; d < n; ++d, ++k) {
          if (k >= src.size() || !std::isxdigit(static_cast<unsigned char>(src[k]))) fail_at(p, "truncated escape in string literal");
          const char h = src[k];
          cp = cp * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        append_utf8(value, cp);
      };
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int d = 0; d < 2 && k < src.size() && src[k] >= '0' && src[k] <= '7'; ++d, ++k) cp = cp * 8 + static_cast<uint32_t>(src[k] - '0');
            append_utf8(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    push(TokType::kString, std::move(value), p);
    return k + 1;
  }

  size_t lex_number(size_t p) {
    size_t k = p;
    auto digits = [&] {
      while (k < src.size() && (std::isdigit(static_cast<unsigned char>(src[k])) || src[k] == '_')) ++k;
    };
    digits();
    bool is_float = false;
    if (k + 1 < src.size() && src[k] == '.' && std::isdigit(static_cast<unsigned char>(src[k + 1]))) {
      ++k;
      digits();
      is_float = true;
    }
    if (k < src.size() && (src[k] == 'e' || src[k] == 'E')) {
      size_t m = k + 1;
      if (m < src.size() && (src[m] == '+' || src[m] == '-')) ++m;
      if (m < src.size() && std::isdigit(static_cast<unsigned char>(src[m]))) {
        k = m;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < k; ++i) {
      if (src[i] != '_') text += src[i];
    }
    push(is_float ? TokType::kFloat : TokType::kInt, text, p);
    return k;
  }

  // Lexes the inside of a {{ }} or {% %} tag; returns the position after its end marker.
  size_t lex_tag(size_t p, bool block, size_t tag_start) {
    const char* end = block ? "%}" : "}}";
    int depth = 0;
    for (;;) {
      while (p < src.size() && is_ws(src[p])) ++p;
      if (p >= src.size()) fail_at(tag_start, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (depth == 0) {
        const bool minus = src[p] == '-' && src.compare(p + 1, 2, end) == 0;
        const bool plus = block && src[p] == '+' && src.compare(p + 1, 2, end) == 0;
        if (minus || plus || src.compare(p, 2, end) == 0) {
          push(block ? TokType::kBlockEnd : TokType::kVarEnd, "", p);
          p += (minus || plus) ? 3 : 2;
          if (minus) {
            while (p < src.size() && is_ws(src[p])) ++p;
          } else if (block && !plus && p < src.size() && src[p] == '\n') {
            ++p;  // trim_blocks
          }
          return p;
        }
      }
      const char c = src[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t k = p;
        while (k < src.size() && (std::isalnum(static_cast<unsigned char>(src[k])) || src[k] == '_')) ++k;
        push(TokType::kName, src.substr(p, k - p), p);
        p = k;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : kTwo) {
          if (src.compare(p, 2, t) == 0) op = t;
        }
        if (op.empty()) {
          if (std::strchr("+-*/%~<>=()[]{},.:|", c) == nullptr) fail_at(p, std::string("unexpected char '") + c + "'");
          op = std::string(1, c);
        }
        if ((op == "(" || op == "[" || op == "{") && ++depth > limits::kMaxNesting) {
          fail_at(p, fmt::format("brackets nested deeper than {} levels", limits::kMaxNesting));
        }
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        push(TokType::kOp, op, p);
        p += op.size();
      }
    }
  }

  void run() {
    bool line_starting = true;
    while (pos < src.size()) {
      size_t start = src.find('{', pos);
      while (start != std::string::npos && start + 1 < src.size() && std::strchr("{%#", src[start + 1]) == nullptr) {
        start = src.find('{', start + 1);
      }
      if (start == std::string::npos || start + 1 >= src.size()) {
        push(TokType::kText, src.substr(pos), pos);
        break;
      }
      const char kind = src[start + 1];
      const char sign = start + 2 < src.size() ? src[start + 2] : '\0';
      std::string text = src.substr(pos, start - pos);
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool all_ws = true;
          for (size_t k = l_pos; k < text.size(); ++k) all_ws = all_ws && is_ws(text[k]);
          if (all_ws) text.resize(l_pos);
        }
      }
      if (!text.empty()) push(TokType::kText, text, pos);
      advance_to(start);
      size_t p = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        size_t e = src.find("#}", p);
        if (e == std::string::npos) fail_at(start, "missing end of comment tag");
        const char before = e > p ? src[e - 1] : '\0';
        p = e + 2;
        if (before == '-') {
          while (p < src.size() && is_ws(src[p])) ++p;
        } else if (before != '+' && p < src.size() && src[p] == '\n') {
          ++p;
        }
      } else {
        push(kind == '{' ? TokType::kVarBegin : TokType::kBlockBegin, "", start);
        p = lex_tag(p, kind == '%', start);
      }
      line_starting = p > 0 && src[p - 1] == '\n';
      advance_to(p);
    }
    push(TokType::kEof, "", src.size());
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& name) {
  // jinja2 normalises line endings to "\n" and drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lx{src, name};
  lx.run();
  return std::move(lx.out);
}

}  // namespace sampan::chat
