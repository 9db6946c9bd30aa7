// The evaluator: executes the syntax tree with jinja2's scoping (a for-loop body and a macro get
// their own scope; if and set do not) and produces the rendered string.
#include "engine/chat/chat_template.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>

#include "engine/chat/ast.h"
#include "engine/chat/builtins.h"
#include "engine/chat/limits.h"
#include "engine/core/error.h"

namespace sampan::chat {
namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* lookup(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(n);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

struct Evaluator {
  int line = 1;
  int col = 1;
  int nesting = 0;     // recursion of eval/exec, across macro calls (limits::kMaxRenderNesting)
  int call_depth = 0;  // nested macro calls (limits::kMaxCallDepth)

  // Counts one level of evaluator recursion for its lifetime.
  struct Nest {
    int& n;
    explicit Nest(int& counter) : n(counter) {
      if (++n > limits::kMaxRenderNesting) {
        render_fail(fmt::format("template nested deeper than {} levels while rendering", limits::kMaxRenderNesting));
      }
    }
    ~Nest() { --n; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };

  // out += piece, unless the result would pass limits::kMaxStringBytes.
  static void emit(std::string& out, const std::string& piece) {
    const uint64_t total = static_cast<uint64_t>(out.size()) + piece.size();
    if (total > limits::kMaxStringBytes) check_string_size(total);  // fails
    charge_bytes(piece.size());
    out += piece;
  }

  void at(const Expr& e) {
    line = e.line;
    col = e.col;
  }

  CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& sc) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], sc));
    for (const auto& [key, ex] : e.kwargs) a.kw.emplace_back(key, eval(*ex, sc));
    return a;
  }

  Value eval(const Expr& e, const ScopePtr& sc) {
    Nest nest(nesting);
    charge_steps(1);
    switch (e.type) {
      case ExprType::kLiteral: return e.value;
      case ExprType::kName: {
        const Value* v = sc->lookup(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprType::kGetAttr: {
        Value obj = eval(*e.args[0], sc);
        at(e);
        return get_attr(obj, e.name);
      }
      case ExprType::kGetItem: {
        Value obj = eval(*e.args[0], sc);
        Value key = eval(*e.args[1], sc);
        at(e);
        return get_item(obj, key);
      }
      case ExprType::kSlice: {
        Value obj = eval(*e.args[0], sc);
        Value parts[3];
        for (int k = 0; k < 3; ++k) parts[k] = e.args[1 + k] ? eval(*e.args[1 + k], sc) : Value::none();
        at(e);
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case ExprType::kCall: {
        Value fn = eval(*e.args[0], sc);
        CallArgs a = eval_args(e, 1, sc);
        at(e);
        if (fn.kind != Kind::kCallable) {
          check_defined(fn);
          render_fail(fmt::format("'{}' is not callable", type_name(fn)));
        }
        return (*fn.fn)(a);
      }
      case ExprType::kFilter: {
        Value v = e.args[0] ? eval(*e.args[0], sc) : Value::none();
        CallArgs a = eval_args(e, 1, sc);
        at(e);
        return apply_filter(e.name, v, a);
      }
      case ExprType::kTest: {
        Value v = eval(*e.args[0], sc);
        CallArgs a = eval_args(e, 1, sc);
        at(e);
        return Value::boolean(apply_test(e.name, v, a) != e.negate);
      }
      case ExprType::kNot: return Value::boolean(!truthy(eval(*e.args[0], sc)));
      case ExprType::kNeg:
      case ExprType::kPos: {
        Value v = eval(*e.args[0], sc);
        at(e);
        // Python keeps the sign of a float zero: -(0.0) is -0.0 and +(-0.0) is -0.0.
        if (v.kind == Kind::kFloat) return e.type == ExprType::kPos ? v : Value::real(-v.f);
        if (e.type == ExprType::kPos) return binary_op("+", Value::integer(0), v);
        return binary_op("-", Value::integer(0), v);
      }
      case ExprType::kBinary: {
        Value a = eval(*e.args[0], sc);
        Value b = eval(*e.args[1], sc);
        at(e);
        return binary_op(e.name, a, b);
      }
      case ExprType::kAnd: {
        Value a = eval(*e.args[0], sc);
        return truthy(a) ? eval(*e.args[1], sc) : a;
      }
      case ExprType::kOr: {
        Value a = eval(*e.args[0], sc);
        return truthy(a) ? a : eval(*e.args[1], sc);
      }
      case ExprType::kCond:
        if (truthy(eval(*e.args[0], sc))) return eval(*e.args[1], sc);
        return e.args[2] ? eval(*e.args[2], sc) : Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
      case ExprType::kList:
      case ExprType::kTuple: {
        List items;
        for (const auto& x : e.args) items.push_back(eval(*x, sc));
        return Value::make_list(std::move(items), e.type == ExprType::kTuple);
      }
      case ExprType::kDict: {
        Dict items;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k], sc);
          Value val = eval(*e.args[k + 1], sc);
          if (key.kind != Kind::kString) {
            at(e);
            render_unsupported("dict literal with a non-string key");
          }
          auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == key.s; });
          if (it != items.end()) {
            it->second = std::move(val);
          } else {
            items.emplace_back(key.s, std::move(val));
          }
        }
        return Value::make_dict(std::move(items));
      }
    }
    return Value::none();
  }

  void assign(const Node& n, const Value& v, const ScopePtr& sc) {
    if (n.targets.size() == 1) {
      sc->vars[n.targets[0]] = v;
      return;
    }
    List items = iterate(v);
    if (items.size() != n.targets.size()) {
      render_fail(items.size() > n.targets.size() ? fmt::format("too many values to unpack (expected {})", n.targets.size())
                                                  : fmt::format("not enough values to unpack (expected {}, got {})", n.targets.size(), items.size()));
    }
    for (size_t k = 0; k < items.size(); ++k) sc->vars[n.targets[k]] = items[k];
  }

  Flow exec(const Body& body, const ScopePtr& sc, std::string& out) {
    Nest nest(nesting);
    for (const auto& n : body) {
      line = n->line;
      col = n->col;
      charge_steps(1);
      const Flow f = exec_node(*n, sc, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Value make_macro(const Node& n, const ScopePtr& defining) {
    const Node* node = &n;
    // Weak: the defining scope holds the macro, so a strong reference would be a cycle.
    std::weak_ptr<Scope> weak = defining;
    return Value::function([this, node, weak](CallArgs& a) {
      ScopePtr defining = weak.lock();
      if (!defining) render_unsupported("calling a macro outside the scope that defined it");
      // jinja2 runs each macro call as a Python call: deep recursion is Python's RecursionError.
      struct CallDepth {
        int& d;
        ~CallDepth() { --d; }
      } depth_guard{++call_depth};
      if (call_depth > limits::kMaxCallDepth) {
        render_fail(fmt::format("maximum recursion depth exceeded calling macro '{}' (more than {} nested calls)",
                                node->type == NodeType::kMacro ? node->text : "caller", limits::kMaxCallDepth));
      }
      auto sc = std::make_shared<Scope>();
      sc->parent = defining;
      for (size_t k = 0; k < node->params.size(); ++k) {
        const auto& [pname, def] = node->params[k];
        const Value* given = a.get(k, pname.c_str());
        sc->vars[pname] = given ? *given : def ? eval(*def, defining) : Value::undefined("'" + pname + "' is undefined");
      }
      if (const Value* c = a.get(SIZE_MAX, "caller")) sc->vars["caller"] = *c;  // from {% call %}
      std::string out;
      const int saved_line = line, saved_col = col;
      exec(node->body, sc, out);
      line = saved_line;
      col = saved_col;
      return Value::string(std::move(out));
    });
  }

  Flow exec_for(const Node& n, const ScopePtr& sc, std::string& out) {
    Value seq = eval(*n.expr, sc);
    List items;
    if (seq.kind == Kind::kDict) {
      items = iterate(seq);
    } else {
      items = iterate(seq);
    }
    auto body_scope = [&] {
      auto s = std::make_shared<Scope>();
      s->parent = sc;
      return s;
    };
    if (n.filter) {
      List kept;
      for (const Value& item : items) {
        charge_steps(1);
        auto s = body_scope();
        assign(n, item, s);
        if (truthy(eval(*n.filter, s))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    // loop.changed(*args) compares with the arguments of its previous call in this loop. The loop
    // owns that state and `changed` holds it weakly: the arguments may be the loop object itself,
    // and a strong reference would then be a cycle that is never freed.
    auto last_changed = std::make_shared<std::optional<List>>();
    const std::weak_ptr<std::optional<List>> changed_state = last_changed;
    // jinja2 clears its "no iteration" flag at the end of the loop body, so the else branch also
    // runs when every iteration left the body through break or continue.
    bool body_completed = false;
    for (int64_t k = 0; k < len; ++k) {
      charge_steps(1);
      auto s = body_scope();
      assign(n, items[static_cast<size_t>(k)], s);
      Dict loop = {
          {"index", Value::integer(k + 1)},
          {"index0", Value::integer(k)},
          {"revindex", Value::integer(len - k)},
          {"revindex0", Value::integer(len - k - 1)},
          {"first", Value::boolean(k == 0)},
          {"last", Value::boolean(k == len - 1)},
          {"length", Value::integer(len)},
          {"depth", Value::integer(1)},
          {"depth0", Value::integer(0)},
          {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item")},
          {"nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item")},
      };
      const int64_t idx = k;
      loop.emplace_back("cycle", Value::function([idx](CallArgs& a) {
                          if (a.pos.empty()) render_fail("no items for cycling given");
                          return a.pos[static_cast<size_t>(idx) % a.pos.size()];
                        }));
      loop.emplace_back("changed", Value::function([changed_state](CallArgs& a) {
                          auto last = changed_state.lock();
                          if (!last) render_unsupported("loop.changed() after its loop has ended");
                          if (*last && equals(Value::make_list(**last, true), Value::make_list(a.pos, true))) {
                            return Value::boolean(false);
                          }
                          *last = a.pos;
                          return Value::boolean(true);
                        }));
      s->vars["loop"] = Value::make_dict(std::move(loop));
      const Flow f = exec(n.body, s, out);
      if (f == Flow::kBreak) break;
      if (f == Flow::kNormal) body_completed = true;
    }
    if (!body_completed) return exec(n.else_body, sc, out);
    return Flow::kNormal;
  }

  Flow exec_node(const Node& n, const ScopePtr& sc, std::string& out) {
    switch (n.type) {
      case NodeType::kText: emit(out, n.text); return Flow::kNormal;
      case NodeType::kOutput: {
        const std::string text = to_str(eval(*n.expr, sc));
        line = n.line;  // a too-long output is this statement's fault
        col = n.col;
        emit(out, text);
        return Flow::kNormal;
      }
      case NodeType::kIf:
        for (const auto& [body, cond] : n.branches) {
          if (!cond || truthy(eval(*cond, sc))) return exec(body, sc, out);
        }
        return Flow::kNormal;
      case NodeType::kFor: return exec_for(n, sc, out);
      case NodeType::kSet: {
        Value v = eval(*n.expr, sc);
        if (!n.attr.empty()) {
          const Value* ns = sc->lookup(n.targets[0]);
          line = n.line;
          col = n.col;
          if (!ns || ns->kind != Kind::kNamespace) render_fail("cannot assign attribute on non-namespace object");
          if (!n.attr.empty() && n.attr[0] == '_') {
            render_fail(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'. Please rename the attribute.", n.attr));
          }
          for (auto& [k, val] : *ns->dict) {
            if (k == n.attr) {
              val = std::move(v);
              return Flow::kNormal;
            }
          }
          ns->dict->emplace_back(n.attr, std::move(v));
          return Flow::kNormal;
        }
        assign(n, v, sc);
        return Flow::kNormal;
      }
      case NodeType::kSetBlock: {
        std::string captured;
        exec(n.body, sc, captured);
        Value v = Value::string(std::move(captured));
        if (n.filter) {
          // The filter chain was parsed onto a placeholder literal; substitute the captured body.
          const Expr* f = n.filter.get();
          std::vector<const Expr*> chain;
          for (; f && f->type == ExprType::kFilter; f = f->args[0].get()) chain.push_back(f);
          for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            CallArgs a = eval_args(**it, 1, sc);
            at(**it);
            v = apply_filter((*it)->name, v, a);
          }
        }
        sc->vars[n.targets[0]] = std::move(v);
        return Flow::kNormal;
      }
      case NodeType::kMacro: sc->vars[n.text] = make_macro(n, sc); return Flow::kNormal;
      case NodeType::kCallBlock: {
        // As jinja2: the macro gets the call block's body as its `caller` keyword argument.
        Value fn = eval(*n.expr->args[0], sc);
        CallArgs a = eval_args(*n.expr, 1, sc);
        a.kw.emplace_back("caller", make_macro(n, sc));
        at(*n.expr);
        if (fn.kind != Kind::kCallable) {
          check_defined(fn);
          render_fail(fmt::format("'{}' is not callable", type_name(fn)));
        }
        emit(out, to_str((*fn.fn)(a)));
        return Flow::kNormal;
      }
      case NodeType::kBreak: return Flow::kBreak;
      case NodeType::kContinue: return Flow::kContinue;
      case NodeType::kScope: return exec(n.body, sc, out);
    }
    return Flow::kNormal;
  }
};

}  // namespace

struct Template::Impl {
  std::string name;
  Body body;
};

Template::Template(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Template Template::parse(const std::string& source, const std::string& name) {
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  impl->body = parse_tokens(lex(source, name), name);
  return Template(std::move(impl));
}

namespace {

// Renders `body` with the JSON `variables`, turning a RenderError (from the conversion of the
// variables too: their nesting and sizes are bounded) into an Error naming the location.
template <typename J>
std::string render_json(const std::string& name, const Body& body, const J& variables) {
  SAMPAN_CHECK(variables.is_object(), ErrorCode::kInvalidArgument, "{}: template variables must be a JSON object", name);
  RenderBudget budget;
  Evaluator ev;
  std::string out;
  try {
    Value vars;
    try {
      vars = from_json(variables);
    } catch (const RenderError& e) {
      throw RenderError{e.unsupported, "template variables: " + e.message};
    }
    auto globals = std::make_shared<Scope>();
    for (auto& [k, v] : make_globals()) globals->vars[k] = std::move(v);
    auto top = std::make_shared<Scope>();
    top->parent = globals;
    for (const auto& [k, v] : *vars.dict) top->vars[k] = v;
    ev.exec(body, top, out);
  } catch (const RenderError& e) {
    if (e.unsupported) {
      fail(ErrorCode::kUnsupported, "{}:{}:{}: unsupported construct '{}'", name, ev.line, ev.col, e.message);
    }
    fail(ErrorCode::kInvalidArgument, "{}:{}:{}: {}", name, ev.line, ev.col, e.message);
  }
  return out;
}

}  // namespace

std::string Template::render(const nlohmann::json& variables) const { return render_json(impl_->name, impl_->body, variables); }

std::string Template::render(const nlohmann::ordered_json& variables) const {
  return render_json(impl_->name, impl_->body, variables);
}

}  // namespace sampan::chat
