// The bounds that keep a hostile chat template (it comes from a model file) or hostile values
// (messages and tools come from HTTP clients) from crashing or hanging the server: every input
// past one of them ends in Error(kInvalidArgument) naming the template location, never a stack
// overflow, an unbounded allocation or an endless loop. Under these limits rendering is
// byte-identical to jinja2.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sampan::chat::limits {

// Parser recursion: nested expressions ((((x)))), [[[x]]], not not x, - - x, x if c else y if ...)
// plus nested blocks ({% if %} inside {% for %} ...), counted together, and the height of any
// expression tree (a + b + c ... builds a tree by iteration). Bounding the tree bounds the stack
// the evaluator and the unique_ptr destructors need. Real chat templates nest fewer than 20
// levels; CPython's own parser refuses nesting beyond 200 parentheses.
inline constexpr int kMaxNesting = 256;

// Nested macro calls (a recursive macro, caller()) while rendering. jinja2 runs out of Python's
// default recursion limit (1000 frames) somewhere past 100 nested macro calls; templates that
// render JSON schemas recursively need fewer than 10.
inline constexpr int kMaxCallDepth = 100;

// Nesting of the evaluator itself (expressions, blocks and macro bodies together) at render
// time: the backstop that bounds stack use whatever the mix. kMaxCallDepth macro frames whose
// bodies nest a few levels each fit; each level costs well under 1 KiB of stack, so this stays
// far inside a thread's stack (8 MiB by default).
inline constexpr int kMaxRenderNesting = 2000;

// range() length: jinja2's sandbox MAX_RANGE (same number, same message).
inline constexpr int64_t kMaxRange = 100000;

// Work per render: one step per evaluated expression node, executed statement and loop
// iteration, plus one per item or per kBytesPerStep bytes that a builtin copies or scans (so
// repeated whole-string or whole-list copies inside a loop are caught too). 10 million steps is
// on the order of a second of CPU; real chat templates take a few thousand. 256 bytes copy in
// about the time one node evaluates, and accumulating a 1 MiB string piece by piece over a
// thousand messages stays well inside the budget.
inline constexpr uint64_t kMaxSteps = 10'000'000;
inline constexpr uint64_t kBytesPerStep = 256;

// Size of any string value and of the rendered output. A prompt is bounded by the model's
// context (a million tokens is a few MiB of text); 16 MiB leaves room while keeping one
// render's memory bounded.
inline constexpr size_t kMaxStringBytes = size_t{16} << 20;

// Items of any list a template builds (list repetition, concatenation, a string or range turned
// into a list). A Value is about 128 bytes, so this caps one list near 128 MiB.
inline constexpr size_t kMaxListItems = size_t{1} << 20;

// Nesting of values: lists and dicts converted from the JSON variables, and the recursion of
// printing (str, repr, tojson) and comparing them. JSON parsers commonly stop at 512 or fewer;
// chat messages and tool schemas nest a dozen levels.
inline constexpr int kMaxValueDepth = 256;

}  // namespace sampan::chat::limits
