// The JSON Schema compiler's arrays and objects (json_schema_compiler.h): items, prefixItems,
// uniqueItems over finite sets, properties / required / additionalProperties, maps with
// propertyNames, and oneOf's disjointness check.
#include <algorithm>
#include <set>

#include "engine/core/error.h"
#include "engine/runtime/json_schema_compiler.h"
#include "engine/runtime/schema_union.h"

namespace sampan::runtime::schema_detail {

void Compiler::check_disjoint(const OJson& branches, const std::string& path) {
  if (branches_disjoint(*root_, branches)) return;
  unsupported(path, "'oneOf' is supported where its branches cannot overlap (different "
                    "types, or objects told apart by a required 'const' member); use 'anyOf'");
}

uint32_t Compiler::array(const OJson& s, const std::string& path, int depth) {
  const int64_t lo = bound(s, "minItems", path, 0);
  int64_t hi = bound(s, "maxItems", path, -1);
  if (hi >= 0 && hi < lo) bad(path, "'maxItems' is less than 'minItems'");
  if (auto it = s.find("uniqueItems"); it != s.end()) {
    if (!it->is_boolean()) bad(path + "/uniqueItems", "'uniqueItems' must be a boolean");
    if (it->get<bool>()) return unique_array(s, path, depth, lo, hi);
  }
  // prefixItems: the schemas of the first items, in order (an array may stop before their
  // end); items: the rest's (false: no more items).
  std::vector<uint32_t> prefix;
  if (auto p = s.find("prefixItems"); p != s.end()) {
    if (!p->is_array() || p->empty()) {
      bad(path + "/prefixItems", "'prefixItems' must be a non-empty list of schemas");
    }
    if (p->size() > static_cast<size_t>(JsonSchemaLimits::kMaxLength)) {
      bad(path + "/prefixItems",
          fmt::format("more than {} schemas", JsonSchemaLimits::kMaxLength));
    }
    for (size_t i = 0; i < p->size(); ++i) {
      prefix.push_back(compile((*p)[i], fmt::format("{}/prefixItems/{}", path, i), depth + 1));
    }
  }
  const int64_t n_prefix = static_cast<int64_t>(prefix.size());
  auto it = s.find("items");
  std::optional<uint32_t> rest;
  if (it == s.end()) {
    rest = any_value();
  } else if (*it != OJson(false)) {
    rest = compile(*it, path + "/items", depth + 1);
  } else if (hi < 0 || hi > n_prefix) {
    hi = n_prefix;
  }
  if (hi >= 0 && hi < lo) bad(path, "'minItems' is more than the items allowed");
  auto item_at = [&](int64_t k) { return k < n_prefix ? prefix[k] : *rest; };
  const uint32_t w = ws();
  const Sym close = g_->byte(']'), comma = g_->byte(',');
  // after[k]: k >= 1 items read. Built from the end; unbounded: after[top] loops on the rest.
  uint32_t next;
  int64_t top;
  if (hi < 0) {
    top = std::max<int64_t>({lo, n_prefix, 1});
    next = new_rule();
    g_->add_alt(next, {w, close});
    g_->add_alt(next, {w, comma, w, *rest, next});
  } else {
    next = hi >= 1 ? rule({{w, close}}) : 0;
    top = hi;
  }
  for (int64_t k = top - 1; k >= 1; --k) {
    std::vector<std::vector<Sym>> alts;
    if (k >= lo) alts.push_back({w, close});
    alts.push_back({w, comma, w, item_at(k), next});
    next = rule(std::move(alts));
  }
  std::vector<std::vector<Sym>> alts;
  if (lo == 0) alts.push_back({g_->byte('['), w, close});
  if (hi != 0) alts.push_back({g_->byte('['), w, item_at(0), next});
  return rule(std::move(alts));
}

uint32_t Compiler::unique_array(const OJson& s, const std::string& path, int depth, int64_t lo,
                                int64_t hi) {
  const std::string where = path + "/uniqueItems";
  if (s.contains("prefixItems")) {
    unsupported(where, "'uniqueItems' true beside 'prefixItems' is not supported");
  }
  const auto it = s.find("items");
  if (it == s.end()) {
    unsupported(where, "'uniqueItems' true needs 'items' of a finite set of values");
  }
  compile(*it, path + "/items", depth + 1);  // its errors first
  const OJson& r = resolve_local_refs(*root_, *it);
  std::vector<OJson> values;
  if (r.is_object() && (r.contains("const") || r.contains("enum"))) {
    for (const OJson* v : fixed_values(r, types(r, path + "/items"), path + "/items")) {
      values.push_back(*v);
    }
  } else if (r.is_object() && r.contains("type")) {
    const std::vector<std::string> ts = types(r, path + "/items");
    if (std::all_of(ts.begin(), ts.end(),
                    [](const std::string& t) { return t == "boolean" || t == "null"; })) {
      for (const std::string& t : ts) {
        if (t == "boolean") values.insert(values.end(), {OJson(false), OJson(true)});
        if (t == "null") values.push_back(OJson());
      }
    }
  }
  // Equal values (1 and 1.0 too) count once.
  std::vector<OJson> distinct;
  for (const auto& v : values) {
    if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
  }
  const auto n = static_cast<int64_t>(distinct.size());
  if (n == 0 || n > 64) {
    unsupported(where, "'uniqueItems' true is supported for items from a set of at most 64 "
                       "values (enum, const, boolean, null)");
  }
  if (lo > n) bad(where, fmt::format("'minItems' {} is more than the {} distinct values", lo, n));
  const int64_t top = hi < 0 ? n : std::min(hi, n);
  std::vector<uint32_t> lit;
  for (const auto& v : distinct) lit.push_back(rule({literal(v.dump())}));
  const uint32_t w = ws();
  const Sym close = g_->byte(']'), comma = g_->byte(',');
  // after[k][j]: k items read, the last value j. Without count limits k does not matter.
  const bool counted = lo > 1 || top < n;
  const int64_t levels = counted ? top : 1;
  std::vector<std::vector<uint32_t>> after(levels + 1, std::vector<uint32_t>(n));
  for (int64_t k = levels; k >= 1; --k) {
    for (int64_t j = n - 1; j >= 0; --j) {
      std::vector<std::vector<Sym>> alts;
      if (!counted || k >= lo) alts.push_back({w, close});
      if (!counted || k < top) {
        for (int64_t i = j + 1; i < n; ++i) {
          alts.push_back({w, comma, w, lit[i], after[counted ? k + 1 : 1][i]});
        }
      }
      after[k][j] = rule(std::move(alts));
    }
  }
  std::vector<std::vector<Sym>> alts;
  if (lo == 0) alts.push_back({g_->byte('['), w, close});
  if (top >= 1) {
    for (int64_t i = 0; i < n; ++i) alts.push_back({g_->byte('['), w, lit[i], after[1][i]});
  }
  return rule(std::move(alts));
}

uint32_t Compiler::key_names(const OJson& names, const std::string& path, int depth) {
  OJson as_string = resolve_local_refs(*root_, names);
  if (as_string.is_boolean()) return string(0, -1);
  if (!as_string.is_object()) bad(path, "'propertyNames' must be a schema");
  if (auto t = as_string.find("type"); t != as_string.end()) {
    const std::vector<std::string> ts = types(as_string, path);
    if (std::find(ts.begin(), ts.end(), "string") == ts.end()) {
      bad(path, "'propertyNames' admits no string, so no name");
    }
  }
  as_string["type"] = "string";
  return compile(as_string, path, depth + 1);
}

uint32_t Compiler::object(const OJson& s, const std::string& path, int depth) {
  const uint32_t w = ws();
  const Sym open = g_->byte('{'), close = g_->byte('}'), comma = g_->byte(',');
  const Sym colon = g_->byte(':');
  struct Prop {
    std::string key;
    uint32_t value;
    bool required;
  };
  std::vector<Prop> props;
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) bad(path + "/required", "'required' must be a list of names");
    for (const auto& r : *it) {
      if (!r.is_string()) bad(path + "/required", "'required' must be a list of names");
      required.insert(r.get<std::string>());
    }
  }
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) bad(path + "/properties", "'properties' must be an object");
    for (const auto& [k, v] : it->items()) {
      props.push_back({k, compile(v, path + "/properties/" + k, depth + 1),
                       required.contains(k)});
    }
  }
  // Required names without a schema take any value.
  for (const std::string& r : required) {
    if (std::none_of(props.begin(), props.end(), [&](const Prop& p) { return p.key == r; })) {
      props.push_back({r, any_value(), true});
    }
  }
  const auto extra = s.find("additionalProperties");
  const auto names = s.find("propertyNames");
  if (names != s.end() && !props.empty()) {
    unsupported(path + "/propertyNames",
                "'propertyNames' beside 'properties' or 'required' is not supported");
  }
  if (props.empty()) {
    if (extra != s.end() && *extra == OJson(false)) return rule({literal("{}")});
    if (names != s.end() && *names == OJson(false)) return rule({literal("{}")});
    // A map: members of any name (or one propertyNames admits) with the
    // additionalProperties schema.
    const uint32_t value = extra == s.end() ? any_value()
                                            : compile(*extra, path + "/additionalProperties",
                                                      depth + 1);
    const uint32_t key =
        names == s.end() ? string(0, -1) : key_names(*names, path + "/propertyNames", depth);
    const uint32_t member = rule({{key, w, colon, w, value}});
    const uint32_t more = new_rule();
    g_->add_alt(more, {w, close});
    g_->add_alt(more, {w, comma, w, member, more});
    return rule({{open, w, close}, {open, w, member, more}});
  }
  if (extra != s.end() && !extra->is_boolean()) {
    // Validated when present, but only the named members are generated.
    compile(*extra, path + "/additionalProperties", depth + 1);
  }
  // first[k]: members k.. to go, none written yet; later[k] = ws tail[k]: some written, where
  // tail[k] is ',' and member k, or (optional) tail[k + 1]; tail[n] is '}'. Built from the end,
  // so that whitespace is read once whichever member comes next.
  uint32_t first_next = rule({{close}});
  uint32_t tail_next = rule({{close}});
  uint32_t later_next = rule({{w, tail_next}});
  for (size_t k = props.size(); k-- > 0;) {
    std::vector<Sym> member = cat(literal(OJson(props[k].key).dump()), {w, colon, w});
    member.push_back(props[k].value);
    std::vector<std::vector<Sym>> tail_alts{cat(cat({comma, w}, member), {later_next})};
    std::vector<std::vector<Sym>> first_alts{cat(member, {later_next})};
    if (!props[k].required) {
      tail_alts.push_back({tail_next});
      first_alts.push_back({first_next});
    }
    tail_next = rule(std::move(tail_alts));
    first_next = rule(std::move(first_alts));
    later_next = rule({{w, tail_next}});
  }
  return rule({{open, w, first_next}});
}

}  // namespace sampan::runtime::schema_detail
