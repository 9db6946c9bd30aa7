// Recursive-descent parser following jinja2's grammar and operator precedence.
#include <initializer_list>

#include "engine/chat/ast.h"
#include "engine/chat/limits.h"
#include "engine/core/error.h"

namespace sampan::chat {
namespace {

struct Parser {
  const std::vector<Token>& toks;
  const std::string& name;
  size_t pos = 0;
  int depth = 0;  // recursion of the parse functions: nested expressions and blocks together

  // Counts one level of recursion for its lifetime; a syntax error at `at` past the limit.
  struct Nest {
    Parser& p;
    Nest(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth > limits::kMaxNesting) {
        p.syntax(at, fmt::format("template nested deeper than {} levels", limits::kMaxNesting));
      }
    }
    ~Nest() { --p.depth; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };

  // Adds a child to `parent`, keeping the tree's height within the limit (chains such as
  // a + b + c or x.a.b.c grow the tree by iteration, not recursion).
  void grow(Expr& parent, const ExprPtr& child) {
    if (!child || child->height < parent.height) return;
    parent.height = child->height + 1;
    if (parent.height > limits::kMaxNesting) {
      fail(ErrorCode::kInvalidArgument, "{}:{}:{}: expression nested deeper than {} levels", name, parent.line, parent.col,
           limits::kMaxNesting);
    }
  }
  void attach(Expr& parent, ExprPtr child) {
    grow(parent, child);
    parent.args.push_back(std::move(child));
  }
  void attach_kw(Expr& parent, std::string key, ExprPtr child) {
    grow(parent, child);
    parent.kwargs.emplace_back(std::move(key), std::move(child));
  }

  const Token& cur() const { return toks[pos]; }
  const Token& next() { return toks[pos++]; }
  bool is_op(const char* op) const { return cur().type == TokType::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokType::kName && cur().text == n; }

  [[noreturn]] void syntax(const Token& t, const std::string& msg) {
    fail(ErrorCode::kInvalidArgument, "{}:{}:{}: {}", name, t.line, t.col, msg);
  }
  [[noreturn]] void unsupported(const Token& t, const std::string& what) {
    fail(ErrorCode::kUnsupported, "{}:{}:{}: unsupported construct '{}'", name, t.line, t.col, what);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokType::kEof: return "end of template";
      case TokType::kVarEnd: return "end of print statement";
      case TokType::kBlockEnd: return "end of statement block";
      case TokType::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) syntax(cur(), std::string("expected '") + op + "', got " + describe(cur()));
    ++pos;
  }
  std::string expect_name() {
    if (cur().type != TokType::kName) syntax(cur(), "expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != TokType::kBlockEnd) syntax(cur(), "expected end of statement block, got " + describe(cur()));
    ++pos;
  }

  ExprPtr make(ExprType t, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->type = t;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_cond = true) {
    const Token& at = cur();
    Nest nest(*this, at);
    ExprPtr e = parse_or();
    while (with_cond && is_name("if")) {
      ++pos;
      auto c = make(ExprType::kCond, at);
      ExprPtr test = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        ++pos;
        other = parse_expression();
      }
      attach(*c, std::move(test));
      attach(*c, std::move(e));
      attach(*c, std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprType t, const std::string& op, ExprPtr l, ExprPtr r, const Token& at) {
    auto e = make(t, at);
    e->name = op;
    attach(*e, std::move(l));
    attach(*e, std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      l = binary(ExprType::kOr, "or", std::move(l), parse_and(), at);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      l = binary(ExprType::kAnd, "and", std::move(l), parse_not(), at);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this, cur());
      auto e = make(ExprType::kNot, next());
      attach(*e, parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    for (;;) {
      const Token& at = cur();
      std::string op;
      if (at.type == TokType::kOp && (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == "<=" ||
                                       at.text == ">" || at.text == ">=")) {
        op = at.text;
        ++pos;
      } else if (is_name("in")) {
        op = "in";
        ++pos;
      } else if (is_name("not") && toks[pos + 1].type == TokType::kName && toks[pos + 1].text == "in") {
        op = "notin";
        pos += 2;
      } else {
        return l;
      }
      // Chained comparisons (a < b < c) fold pairwise, which matches Python only for one operator.
      l = binary(ExprType::kBinary, op, std::move(l), parse_math1(), at);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      l = binary(ExprType::kBinary, at.text, std::move(l), parse_concat(), at);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      l = binary(ExprType::kBinary, "~", std::move(l), parse_math2(), at);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      l = binary(ExprType::kBinary, at.text, std::move(l), parse_pow(), at);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      l = binary(ExprType::kBinary, "**", std::move(l), parse_unary(true), at);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      Nest nest(*this, cur());
      const Token& at = next();
      e = make(at.text == "-" ? ExprType::kNeg : ExprType::kPos, at);
      attach(*e, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case TokType::kName: {
        ++pos;
        auto e = make(ExprType::kLiteral, t);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->type = ExprType::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokType::kString: {
        std::string s;
        while (cur().type == TokType::kString) s += next().text;
        auto e = make(ExprType::kLiteral, t);
        e->value = Value::string(std::move(s));
        return e;
      }
      case TokType::kInt: {
        ++pos;
        auto e = make(ExprType::kLiteral, t);
        try {
          e->value = Value::integer(std::stoll(t.text));
        } catch (const std::exception&) {
          unsupported(t, "integer literal " + t.text);
        }
        return e;
      }
      case TokType::kFloat: {
        ++pos;
        auto e = make(ExprType::kLiteral, t);
        e->value = Value::real(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case TokType::kOp:
        if (t.text == "(") {
          ++pos;
          ExprPtr e = parse_tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          ++pos;
          auto e = make(ExprType::kList, t);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            attach(*e, parse_expression());
          }
          ++pos;
          return e;
        }
        if (t.text == "{") {
          ++pos;
          auto e = make(ExprType::kDict, t);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            attach(*e, parse_expression());
            expect_op(":");
            attach(*e, parse_expression());
          }
          ++pos;
          return e;
        }
        break;
      default: break;
    }
    syntax(t, "unexpected " + describe(t));
  }

  // A comma-separated expression list; one element without a trailing comma is that element.
  ExprPtr parse_tuple(bool with_cond, bool in_parens) {
    const Token& at = cur();
    auto tup = make(ExprType::kTuple, at);
    bool trailing_comma = false;
    for (;;) {
      if (in_parens && is_op(")")) break;
      if (!in_parens && (cur().type == TokType::kBlockEnd || cur().type == TokType::kVarEnd || is_name("if") ||
                         is_name("recursive")) && !tup->args.empty()) {
        break;
      }
      attach(*tup, parse_expression(with_cond));
      trailing_comma = false;
      if (!is_op(",")) break;
      ++pos;
      trailing_comma = true;
    }
    if (tup->args.size() == 1 && !trailing_comma) return std::move(tup->args[0]);
    if (tup->args.empty() && !in_parens) syntax(at, "expected an expression, got " + describe(at));
    return tup;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    const size_t first = e.args.size();
    while (!is_op(")")) {
      if (e.args.size() > first || !e.kwargs.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) unsupported(cur(), "*args in a call");
      if (cur().type == TokType::kName && toks[pos + 1].type == TokType::kOp && toks[pos + 1].text == "=") {
        std::string key = next().text;
        ++pos;
        attach_kw(e, std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) syntax(cur(), "positional argument after keyword argument");
        attach(e, parse_expression());
      }
    }
    ++pos;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      const Token& at = cur();
      if (is_op(".")) {
        ++pos;
        auto g = make(ExprType::kGetAttr, at);
        if (cur().type == TokType::kInt) {
          g->type = ExprType::kGetItem;
          attach(*g, std::move(e));
          auto idx = make(ExprType::kLiteral, cur());
          try {
            idx->value = Value::integer(std::stoll(cur().text));
          } catch (const std::exception&) {
            unsupported(cur(), "integer literal " + cur().text);
          }
          ++pos;
          attach(*g, std::move(idx));
        } else {
          g->name = expect_name();
          attach(*g, std::move(e));
        }
        e = std::move(g);
      } else if (is_op("[")) {
        ++pos;
        e = parse_subscript(std::move(e), at);
      } else if (is_op("(")) {
        auto c = make(ExprType::kCall, at);
        attach(*c, std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, const Token& at) {
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    for (;;) {
      if (is_op(":")) {
        slice = true;
        ++pos;
        if (++n > 2) syntax(cur(), "too many ':' in slice");
        continue;
      }
      if (is_op("]")) break;
      if (parts[n]) syntax(cur(), "expected ']', got " + describe(cur()));
      parts[n] = parse_expression();
    }
    ++pos;
    auto e = make(slice ? ExprType::kSlice : ExprType::kGetItem, at);
    attach(*e, std::move(target));
    if (!slice) {
      if (!parts[0]) syntax(at, "expected an index");
      attach(*e, std::move(parts[0]));
    } else {
      for (auto& p : parts) attach(*e, std::move(p));
    }
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      ++pos;
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr e, const Token& at) {
    auto f = make(ExprType::kFilter, at);
    f->name = dotted_name();
    attach(*f, std::move(e));
    if (is_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      const Token& at = cur();
      if (is_op("|")) {
        ++pos;
        e = parse_filter(std::move(e), at);
      } else if (is_name("is")) {
        ++pos;
        auto t = make(ExprType::kTest, at);
        if (is_name("not")) {
          ++pos;
          t->negate = true;
        }
        t->name = dotted_name();
        attach(*t, std::move(e));
        const Token& c = cur();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((c.type == TokType::kName || c.type == TokType::kString || c.type == TokType::kInt ||
                    c.type == TokType::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) syntax(c, "You cannot chain multiple tests with is");
          attach(*t, parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        auto c = make(ExprType::kCall, at);
        attach(*c, std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // ---- statements ----

  NodePtr make_node(NodeType t, const Token& at) {
    auto n = std::make_unique<Node>();
    n->type = t;
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  // Parses until a block whose first name is in `ends`; leaves pos on that name.
  Body parse_body(std::initializer_list<const char*> ends, const Token& opener) {
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == TokType::kEof) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        syntax(opener, "unexpected end of template, expected " + want);
      }
      if (t.type == TokType::kText) {
        auto n = make_node(NodeType::kText, t);
        n->text = next().text;
        body.push_back(std::move(n));
      } else if (t.type == TokType::kVarBegin) {
        ++pos;
        auto n = make_node(NodeType::kOutput, t);
        n->expr = parse_tuple(true, false);
        if (cur().type != TokType::kVarEnd) syntax(cur(), "expected end of print statement, got " + describe(cur()));
        ++pos;
        body.push_back(std::move(n));
      } else if (t.type == TokType::kBlockBegin) {
        const Token& kw = toks[pos + 1];
        if (kw.type != TokType::kName) syntax(kw, "expected a statement name, got " + describe(kw));
        for (const char* e : ends) {
          if (kw.text == e) {
            ++pos;
            return body;
          }
        }
        ++pos;
        body.push_back(parse_statement());
      } else {
        syntax(t, "unexpected " + describe(t));
      }
    }
  }

  void end_block(const char* name_) {
    if (!is_name(name_)) syntax(cur(), std::string("expected '") + name_ + "'");
    ++pos;
    expect_block_end();
  }

  NodePtr parse_statement() {
    Nest nest(*this, cur());
    const Token& kw = next();
    const std::string& k = kw.text;
    if (k == "if") {
      auto n = make_node(NodeType::kIf, kw);
      ExprPtr cond = parse_tuple(true, false);
      expect_block_end();
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"}, kw);
        n->branches.emplace_back(std::move(b), std::move(cond));
        const std::string which = next().text;
        if (which == "elif") {
          cond = parse_tuple(true, false);
          expect_block_end();
        } else if (which == "else") {
          expect_block_end();
          n->branches.emplace_back(parse_body({"endif"}, kw), nullptr);
          end_block("endif");
          break;
        } else {
          expect_block_end();
          break;
        }
      }
      return n;
    }
    if (k == "for") {
      auto n = make_node(NodeType::kFor, kw);
      const bool paren = is_op("(");
      if (paren) ++pos;
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        ++pos;
        if (is_name("in") || is_op(")")) break;
        n->targets.push_back(expect_name());
      }
      if (paren) expect_op(")");
      if (!is_name("in")) syntax(cur(), "expected 'in', got " + describe(cur()));
      ++pos;
      n->expr = parse_tuple(false, false);
      if (is_name("if")) {
        ++pos;
        n->filter = parse_expression();
      }
      if (is_name("recursive")) unsupported(cur(), "recursive for loop");
      expect_block_end();
      n->body = parse_body({"endfor", "else"}, kw);
      if (next().text == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"}, kw);
        end_block("endfor");
      } else {
        expect_block_end();
      }
      return n;
    }
    if (k == "set") {
      auto n = make_node(NodeType::kSet, kw);
      n->targets.push_back(expect_name());
      if (is_op(".")) {
        ++pos;
        n->attr = expect_name();
      } else {
        while (is_op(",")) {
          ++pos;
          n->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        ++pos;
        n->expr = parse_tuple(true, false);
        expect_block_end();
        return n;
      }
      if (n->targets.size() != 1 || !n->attr.empty()) syntax(cur(), "expected '='");
      n->type = NodeType::kSetBlock;
      if (is_op("|")) {
        const Token& at = next();
        n->filter = parse_filter(make(ExprType::kLiteral, at), at);
        while (is_op("|")) n->filter = parse_filter(std::move(n->filter), next());
      }
      expect_block_end();
      n->body = parse_body({"endset"}, kw);
      end_block("endset");
      return n;
    }
    if (k == "macro" || k == "call") {
      auto n = make_node(k == "macro" ? NodeType::kMacro : NodeType::kCallBlock, kw);
      if (k == "macro") n->text = expect_name();
      if (is_op("(")) {
        ++pos;
        while (!is_op(")")) {
          if (!n->params.empty()) expect_op(",");
          std::string p = expect_name();
          ExprPtr def;
          if (is_op("=")) {
            ++pos;
            def = parse_expression();
          }
          n->params.emplace_back(std::move(p), std::move(def));
        }
        ++pos;
      } else if (k == "macro") {
        syntax(cur(), "expected '('");
      }
      if (k == "call") {
        n->expr = parse_expression();
        if (n->expr->type != ExprType::kCall) syntax(kw, "expected a call expression");
      }
      expect_block_end();
      const char* end = k == "macro" ? "endmacro" : "endcall";
      n->body = parse_body({end}, kw);
      ++pos;
      if (cur().type == TokType::kName && k == "macro") ++pos;  // {% endmacro name %}
      expect_block_end();
      return n;
    }
    if (k == "break" || k == "continue") {
      auto n = make_node(k == "break" ? NodeType::kBreak : NodeType::kContinue, kw);
      expect_block_end();
      return n;
    }
    if (k == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      auto n = make_node(NodeType::kScope, kw);
      expect_block_end();
      n->body = parse_body({"endgeneration"}, kw);
      end_block("endgeneration");
      return n;
    }
    static const char* kUnsupported[] = {"extends", "include", "import", "from",    "block", "filter",
                                         "with",    "raw",     "autoescape", "trans", "do"};
    for (const char* u : kUnsupported) {
      if (k == u) unsupported(kw, std::string("{% ") + u + " %}");
    }
    syntax(kw, "Encountered unknown tag '" + k + "'.");
  }
};

}  // namespace

Body parse_tokens(const std::vector<Token>& tokens, const std::string& name) {
  Parser p{tokens, name};
  Body body = p.parse_body({}, tokens.front());
  return body;
}

}  // namespace sampan::chat
