// Tokens and syntax tree of a chat template (internal to engine/chat).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/value.h"

namespace sampan::chat {

enum class TokType { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokType type = TokType::kEof;
  std::string text;  // text data, name, decoded string literal, number spelling or operator
  int line = 1;
  int col = 1;
};

// Splits `source` into tokens with jinja2's whitespace rules (trim_blocks, lstrip_blocks, '-'
// and '+' markers, one trailing newline dropped). Throws Error(kInvalidArgument) on bad syntax.
std::vector<Token> lex(const std::string& source, const std::string& name);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprType {
  kLiteral,   // value
  kName,      // name
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null children allowed)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..])
  kNot,       // not args[0]
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kBinary,    // args[0] op args[1]: + - * / // % ** ~ == != < <= > >= in notin
  kAnd,
  kOr,
  kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
  kList,
  kTuple,
  kDict,      // args alternate key, value
};

struct Expr {
  ExprType type = ExprType::kLiteral;
  Value value;
  std::string name;  // name, attribute, filter, test or operator
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  int line = 1;
  int col = 1;
  int height = 1;  // levels of the tree rooted here (bounded by limits::kMaxNesting)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeType { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kBreak, kContinue, kScope };

struct Node {
  NodeType type = NodeType::kText;
  std::string text;                  // kText data; kMacro name
  std::vector<std::string> targets;  // kFor / kSet names; kSet "ns.attr" is targets={ns}, attr
  std::string attr;                  // kSet namespace attribute
  ExprPtr expr;                      // output, condition, iterable, value, call
  ExprPtr filter;                    // kFor `if` filter; kSetBlock filter applied to body (args[0] empty)
  std::vector<std::pair<Body, ExprPtr>> branches;  // kIf: (body, condition); else has null condition
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro / kCallBlock parameters, defaults
  int line = 1;
  int col = 1;
};

// Parses tokens into the template body. Throws Error(kInvalidArgument) on syntax errors and
// Error(kUnsupported) on constructs outside the subset.
Body parse_tokens(const std::vector<Token>& tokens, const std::string& name);

}  // namespace sampan::chat
