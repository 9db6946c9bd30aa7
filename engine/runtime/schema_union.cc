#include "engine/runtime/schema_union.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sampan::runtime {
namespace {

using OJson = nlohmann::ordered_json;

const char* kind(const OJson& v) {
  return v.is_number() ? "number" : v.is_string() ? "string" : v.is_boolean() ? "boolean"
         : v.is_null() ? "null" : v.is_object() ? "object" : "array";
}

// The JSON kinds a branch admits ("integer" counted as "number"), when it says so plainly.
std::optional<std::set<std::string>> kinds_of(const OJson& root, const OJson& b) {
  const OJson& r = resolve_local_refs(root, b);
  if (!r.is_object()) return std::nullopt;
  std::set<std::string> out;
  if (auto it = r.find("type"); it != r.end()) {
    for (const auto& t : it->is_array() ? *it : OJson::array({*it})) {
      if (t.is_string()) out.insert(t == "integer" ? "number" : t.get<std::string>());
    }
    return out;
  }
  if (auto c = r.find("const"); c != r.end()) return std::set<std::string>{kind(*c)};
  auto e = r.find("enum");
  if (e == r.end() || !e->is_array()) return std::nullopt;
  for (const auto& v : *e) out.insert(kind(v));
  return out;
}

// The value a branch fixes for member `key` (a required const, or a one-value enum), where the
// branch generates objects only (no type: the compiler infers object from `properties`).
const OJson* tag_of(const OJson& root, const OJson& b, const std::string& key) {
  const OJson& r = resolve_local_refs(root, b);
  if (!r.is_object() || !r.contains("properties") || !r["properties"].is_object() ||
      (r.contains("type") && r["type"] != OJson("object"))) {
    return nullptr;
  }
  const auto req = r.find("required");
  if (req == r.end() || !req->is_array() ||
      std::find(req->begin(), req->end(), OJson(key)) == req->end()) {
    return nullptr;
  }
  const auto p = r["properties"].find(key);
  if (p == r["properties"].end()) return nullptr;
  const OJson& v = resolve_local_refs(root, *p);
  if (!v.is_object()) return nullptr;
  if (auto c = v.find("const"); c != v.end()) return &*c;
  if (auto e = v.find("enum"); e != v.end() && e->is_array() && e->size() == 1) return &(*e)[0];
  return nullptr;
}

}  // namespace

const OJson& resolve_local_refs(const OJson& root, const OJson& schema) {
  const OJson* cur = &schema;
  for (int hop = 0; hop < 8 && cur->is_object() && cur->contains("$ref"); ++hop) {
    const OJson& r = (*cur)["$ref"];
    if (!r.is_string() || r.get_ref<const std::string&>().rfind('#', 0) != 0) break;
    try {
      cur = &root.at(OJson::json_pointer(r.get<std::string>().substr(1)));
    } catch (const nlohmann::json::exception&) {
      break;  // the compiler names it
    }
  }
  return *cur;
}

bool branches_disjoint(const OJson& root, const OJson& branches) {
  if (!branches.is_array() || branches.empty()) return false;
  bool by_kind = true;
  std::set<std::string> seen;
  for (const auto& b : branches) {
    const auto k = kinds_of(root, b);
    if (!k) {
      by_kind = false;
      break;
    }
    for (const std::string& t : *k) by_kind = by_kind && seen.insert(t).second;
  }
  if (by_kind) return true;
  const OJson& first = resolve_local_refs(root, branches[0]);
  if (!first.is_object() || !first.contains("properties") || !first["properties"].is_object()) {
    return false;
  }
  for (const auto& [key, unused] : first["properties"].items()) {
    std::vector<const OJson*> tags;
    for (const auto& b : branches) {
      const OJson* t = tag_of(root, b, key);
      if (!t || std::any_of(tags.begin(), tags.end(), [&](const OJson* x) { return *x == *t; })) {
        break;
      }
      tags.push_back(t);
    }
    if (tags.size() == branches.size()) return true;
  }
  return false;
}

}  // namespace sampan::runtime
