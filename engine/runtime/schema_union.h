// Whether a JSON Schema `oneOf` can be generated as an `anyOf` (json_schema.h): when no value
// can match two of its branches, a value generated from one branch matches exactly one.
#pragma once

#include <nlohmann/json.hpp>

namespace sampan::runtime {

// True where it can be shown that no value matches two of `branches` (a list of schemas whose
// local $refs resolve in `root`): branches of disjoint JSON types (integer inside number), or
// objects told apart by a required member fixed to different values (`const` or a one-value
// `enum`), as a discriminated union is. False where it cannot be shown (which does not mean
// they overlap).
bool branches_disjoint(const nlohmann::ordered_json& root, const nlohmann::ordered_json& branches);

// The schema `schema` stands for after up to 8 local $refs into `root` (itself when it has
// none, or one that does not resolve: the compiler reports those).
const nlohmann::ordered_json& resolve_local_refs(const nlohmann::ordered_json& root,
                                                 const nlohmann::ordered_json& schema);

}  // namespace sampan::runtime
