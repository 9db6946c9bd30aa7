// Chat-template constructs against expected strings. The expected strings were rendered by
// Python jinja2 3.1.6 configured as transformers configures it (ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks, loopcontrols and transformers' tojson) and pasted here.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/core/error.h"

using sampan::chat::Template;

namespace {

std::string render(const std::string& src, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  return Template::parse(src, "t").render(vars);
}

// Runs `fn`, expecting a sampan::Error with `code` whose message contains `part`.
template <typename Fn>
void expect_error(Fn fn, sampan::ErrorCode code, const std::string& part) {
  try {
    fn();
    FAIL("no error raised; expected one containing: " << part);
  } catch (const sampan::Error& e) {
    CHECK(e.code() == code);
    CHECK_THAT(e.what(), Catch::Contains(part));
  }
}

}  // namespace

TEST_CASE("chat template constructs render as jinja2 does", "[chat]") {
  const std::pair<const char*, const char*> cases[] = {
    {R"J({% if true %}
  a
{% endif %}
b
)J",
     R"J(  a
b)J"},
    {R"J(  {%- if x -%}  y  {%- endif -%}  z)J",
     R"J(z)J"},
    {R"J({% for i in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %})J",
     R"J(10TrueFalse332|21FalseFalse321|32FalseTrue310|)J"},
    {R"J({% for i in range(5) if i is odd %}{{ i }}{{ loop.previtem }}-{{ loop.nextitem }},{% else %}none{% endfor %})J",
     R"J(1-3,31-,)J"},
    {R"J({% for i in [] %}x{% else %}empty{% endfor %})J",
     R"J(empty)J"},
    {R"J({% for k, v in {'a': 1, 'b': [1, 'x', none, true]}.items() %}{{ k }}={{ v }};{% endfor %})J",
     R"J(a=1;b=[1, 'x', None, True];)J"},
    {R"J({% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %})J",
     R"J(0134)J"},
    {R"J({% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }})J",
     R"J(6)J"},
    {R"J({% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }})J",
     R"J(13)J"},
    {R"J({% set b %}  body {{ 1 + 1 }}  {% endset %}[{{ b }}]{% set c | trim | upper %}  low  {% endset %}[{{ c }}])J",
     R"J([  body 2  ][LOW])J"},
    {R"J({% macro m(a, b='d') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}{{ m('x', 'y') }})J",
     R"J(<1d><23><xy>)J"},
    {R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2.5 }} {{ 'a' ~ 1 ~ none }} {{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 1/3 }})J",
     R"J(3 -4 1 2 3.5 1024 3.5 a1None 1.0 1e+20 0.0001 0.3333333333333333)J"},
    {R"J({{ 'abc'[::-1] }} {{ [1,2,3,4][1:3] }} {{ [1,2,3][-1] }} {{ 'héllo'[1:3] }} {{ 'hello'[-2:] }} {{ (1, 2) }} {{ {'a': 'it\'s'} }})J",
     R"J(cba [2, 3] 3 él lo (1, 2) {'a': "it's"})J"},
    {R"J({{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aXa' | replace('a', 'b') }}|{{ [1,2] | join(', ') }}|{{ [3,1,2] | sort | list }}|{{ 'abc' | length }})J",
     R"J(x|AB|Hello World|Hello|bXb|1, 2|[1, 2, 3]|3)J"},
    {R"J({{ none | default('d') }}|{{ undefined_var | default('d') }}|{{ '' | default('e', true) }}|{{ [1,2] | first }}{{ [1,2] | last }}|{{ '3' | int + 1 }}|{{ '2.5' | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }})J",
     R"J(None|d|e|12|4|2.5|3|2.57|2.0)J"},
    {R"J({{ [{'a': 1, 'b': 'x'}, {'a': 2}] | selectattr('a', 'equalto', 2) | list }}{{ [{'r': 'u'}, {'r': 'a'}] | map(attribute='r') | join }}{{ [1,2,3,4] | select('even') | list }}{{ [1,2,3,4] | reject('odd') | list }})J",
     R"J([{'a': 2}]ua[2, 4][2, 4])J"},
    {R"J({{ {'b': [1, {'c': 'ü'}], 'a': none, 't': true, 'f': 1.5} | tojson }}
{{ {'b': [1, {}], 'a': []} | tojson(indent=2) }})J",
     R"J({"b": [1, {"c": "ü"}], "a": null, "t": true, "f": 1.5}
{
  "b": [
    1,
    {}
  ],
  "a": []
})J"},
    {R"J({{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ {} is mapping }}{{ [] is iterable }}{{ 4 is divisibleby 2 }}{{ 1 is even }}{{ true is boolean }}{{ 'a' is in 'abc' }}{{ 1 is not none }})J",
     R"J(FalseTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrue)J"},
    {R"J({{ 'a' in 'cat' }}{{ 'z' not in ['a'] }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ not true or false and true }}{{ 'y' if 0 else 'n' }}{{ [] or 'alt' }})J",
     R"J(TrueTrueTrueTrueFalsenalt)J"},
    {R"J({{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'x y  z'.split() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'xyx'.lstrip('x') }}|{{ 'a</think>b'.split('</think>')[-1] }}|{{ {'k': 1}.get('k') }}{{ {'k': 1}.get('z', 'dflt') }}|{{ {'a': 1}.keys() | list }})J",
     R"J(a b|['a', 'b', '', 'c']|['x', 'y', 'z']|TrueTrue|bba|yx|b|1dflt|['a'])J"},
    {R"J({# comment #}
  {# indented comment #}
line
{{- ' trimmed' }}
  {%+ if true %}keep{% endif %}
)J",
     R"J(line trimmed
  keep)J"},
    {R"J({{ 'a\tb\n\u00e9\x41' }}{{ "dq'" }}{{ 'adj' 'acent' }})J",
     R"J(a	b
éAdq'adjacent)J"},
    {R"J({{ 'text
more' | indent(2) }}|{{ 'x

y' | indent(2, true, true) }}|{{ 'one two  three' | wordcount }})J",
     R"J(text
  more|  x
  
  y|3)J"},
    {R"J({% set a, b = [1, 2] %}{{ b }}{{ a }}{% set d = dict(x=1, y='z') %}{{ d }}{{ [1, [2, 'q']] }}{{ none }}{{ true }})J",
     R"J(21{'x': 1, 'y': 'z'}[1, [2, 'q']]NoneTrue)J"},
  };
  for (const auto& [src, want] : cases) {
    INFO("template: " << src);
    CHECK(render(src) == want);
  }
}

TEST_CASE("chat template variables keep JSON key order", "[chat]") {
  const auto vars = nlohmann::ordered_json::parse(R"({"m": {"z": 1, "a": "é\n"}, "bos_token": "<s>"})");
  // Python: json.dumps({"z": 1, "a": "é\n"}, ensure_ascii=False) and dict iteration order.
  CHECK(render("{{ bos_token }}{{ m | tojson }}{% for k in m %}{{ k }}{% endfor %}", vars) ==
        "<s>{\"z\": 1, \"a\": \"é\\n\"}za");
  // The nlohmann::json overload sees the keys sorted.
  CHECK(Template::parse("{% for k in m %}{{ k }}{% endfor %}", "t").render(nlohmann::json::parse(R"({"m": {"z": 1, "a": 2}})")) == "az");
}

TEST_CASE("chat template undefined values behave as jinja2's Undefined", "[chat]") {
  CHECK(render("[{{ missing }}][{{ missing | length }}][{% for x in missing %}x{% endfor %}]") == "[][0][]");
  const auto vars = nlohmann::ordered_json::parse(R"({"msg": {"role": "user"}})");
  CHECK(render("{{ msg.content is defined }}{{ msg.role.x is defined }}", vars) == "FalseFalse");
  expect_error([] { render("{{ missing.attr }}"); }, sampan::ErrorCode::kInvalidArgument, "t:1:11: 'missing' is undefined");
  expect_error([&] { render("{{ msg.content + 'x' }}", vars); }, sampan::ErrorCode::kInvalidArgument,
               "'dict object' has no attribute 'content'");
}

TEST_CASE("chat template corners around None and undefined render as jinja2 does", "[chat]") {
  // Expected strings rendered by jinja2 3.1.6 as transformers configures it; the e2e test
  // test_render_chat_corners.py compares many more cases against jinja2 itself.
  const auto vars = nlohmann::ordered_json::parse(
      R"({"n": null, "l": [1, 2, 3], "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}]})");
  const std::pair<const char*, const char*> cases[] = {
      // select, reject, selectattr, rejectattr and map give nothing for a false value.
      {"{{ n|select|list }}{{ missing|map('upper')|list }}{{ n|selectattr('x')|list }}{{ 0|reject|list }}", "[][][][]"},
      // for-else also runs when no iteration got to the end of the body.
      {"{% for x in l %}{% break %}{% else %}e{% endfor %}|{% for x in l %}{% continue %}{% else %}e{% endfor %}|"
       "{% for x in l %}{% if x < 3 %}{% continue %}{% endif %}{% else %}e{% endfor %}",
       "e|e|"},
      {"{% for x in [1, 1, 2, 1] %}{{ loop.changed(x) }},{% endfor %}", "True,False,True,True,"},
      {"{% set ns = namespace(a=1, b='x') %}{{ ns }}", "<Namespace {'a': 1, 'b': 'x'}>"},
      {"{{ missing is callable }}|{{ missing is lower }}|{{ '12' is lower }}|{{ 'ab1' is lower }}|{{ n is upper }}",
       "True|False|False|True|False"},
      {"{{ l <= l }}|{{ [n] <= [n] }}|{{ 1 <= 1.0 }}", "True|True|True"},
      // transformers' tojson(x, ensure_ascii, indent, separators, sort_keys), and -0.0.
      {"{{ {'b': '\u00e9', 'a': [1, 2]}|tojson(true) }}|{{ {'b': 1, 'a': {'d': 1, 'c': 2}}|tojson(sort_keys=true) }}|"
       "{{ {'b': 1, 'a': [1, 2]}|tojson(separators=(',', ':')) }}|{{ [1]|tojson(indent='>') }}|{{ -0.0 }}",
       "{\"b\": \"\\u00e9\", \"a\": [1, 2]}|{\"a\": {\"c\": 2, \"d\": 1}, \"b\": 1}|{\"b\":1,\"a\":[1,2]}|[\n>1\n]|-0.0"},
  };
  for (const auto& [src, want] : cases) {
    INFO("template: " << src);
    CHECK(render(src, vars) == want);
  }
  // Where jinja2 raises.
  const char* errors[] = {
      "{{ n <= n }}",
      "{{ n|indent }}",
      "{{ missing|int }}",
      "{{ l[missing:] }}",
      "{{ 'abc'.replace('b', n) }}",
      "{{ ', '.join([1]) }}",
      "{% set ns = namespace(a=1) %}{{ ns|length }}",
      "{{ {}.get() }}",
  };
  for (const char* src : errors) {
    INFO("template: " << src);
    CHECK_THROWS_AS(render(src, vars), sampan::Error);
  }
}

TEST_CASE("chat template errors name the place and the construct", "[chat]") {
  expect_error([] { render("{{ raise_exception('Roles must alternate') }}"); }, sampan::ErrorCode::kInvalidArgument,
               "Roles must alternate");
  expect_error([] { Template::parse("a\n  {% extends 'base' %}", "tpl"); }, sampan::ErrorCode::kUnsupported,
               "tpl:2:6: unsupported construct '{% extends %}'");
  expect_error([] { Template::parse("{% include 'x' %}", "tpl"); }, sampan::ErrorCode::kUnsupported, "unsupported construct '{% include %}'");
  expect_error([] { render("{{ 'x' | center(9) }}"); }, sampan::ErrorCode::kUnsupported, "unsupported construct 'filter 'center''");
  expect_error([] { render("{{ 1 is wobbly }}"); }, sampan::ErrorCode::kUnsupported, "test 'wobbly'");
  expect_error([] { Template::parse("{{ 1 + }}", "tpl"); }, sampan::ErrorCode::kInvalidArgument, "tpl:1:8:");
  expect_error([] { Template::parse("{% if x %}", "tpl"); }, sampan::ErrorCode::kInvalidArgument, "or 'endif'");
  expect_error([] { Template::parse("{% frobnicate %}", "tpl"); }, sampan::ErrorCode::kInvalidArgument, "unknown tag 'frobnicate'");
  expect_error([] { render("{{ [1].append(2) }}"); }, sampan::ErrorCode::kInvalidArgument, "unsafe");
}

TEST_CASE("strftime_now honours SAMPAN_FAKE_DATE", "[chat]") {
  ::setenv("SAMPAN_FAKE_DATE", "2024-09-05", 1);
  // Python: datetime(2024, 9, 5).strftime("%d %b %Y %A")
  CHECK(render("{{ strftime_now('%d %b %Y %A') }}") == "05 Sep 2024 Thursday");
  ::unsetenv("SAMPAN_FAKE_DATE");
}

// ---- limits against hostile templates and values (engine/chat/limits.h) ----

namespace {

// Matches a sampan::Error of kInvalidArgument whose message starts with `where` (the template
// location, "<name>:<line>:<col>: ") and contains `what`.
class ErrorAt : public Catch::MatcherBase<sampan::Error> {
 public:
  ErrorAt(std::string where, std::string what) : where_(std::move(where)), what_(std::move(what)) {}
  bool match(const sampan::Error& e) const override {
    const std::string m = e.what();
    return e.code() == sampan::ErrorCode::kInvalidArgument && m.rfind(where_, 0) == 0 &&
           m.find(what_) != std::string::npos && m.find('\n') == std::string::npos;
  }
  std::string describe() const override { return "is an invalid-argument error at '" + where_ + "' containing '" + what_ + "'"; }

 private:
  std::string where_, what_;
};

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t k = 0; k < n; ++k) out += s;
  return out;
}

}  // namespace

TEST_CASE("chat template parser bounds nesting", "[chat][limits]") {
  // 100,000 nested parentheses and list brackets: the lexer stops at the 257th bracket.
  const std::string parens = "{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}";
  REQUIRE_THROWS_MATCHES(Template::parse(parens, "t"), sampan::Error, ErrorAt("t:1:260: ", "brackets nested deeper than 256 levels"));
  const std::string lists = "{{ " + repeat("[", 100000) + "1" + repeat("]", 100000) + " }}";
  REQUIRE_THROWS_MATCHES(Template::parse(lists, "t"), sampan::Error, ErrorAt("t:1:260: ", "brackets nested deeper than 256 levels"));
  // Recursion without brackets: not not not ... x, - - - ... 1.
  REQUIRE_THROWS_MATCHES(Template::parse("{{ " + repeat("not ", 100000) + "x }}", "t"), sampan::Error,
                         ErrorAt("t:1:1024: ", "template nested deeper than 256 levels"));
  REQUIRE_THROWS_MATCHES(Template::parse("{{ " + repeat("- ", 100000) + "1 }}", "t"), sampan::Error,
                         ErrorAt("t:1:", "template nested deeper than 256 levels"));
  // A tree built by iteration: 1 + 1 + ... (100,000 terms).
  REQUIRE_THROWS_MATCHES(Template::parse("{{ 1" + repeat(" + 1", 100000) + " }}", "t"), sampan::Error,
                         ErrorAt("t:1:", "expression nested deeper than 256 levels"));
  // {% if %} nested 10,000 deep: the 256th if's condition is the 257th level.
  const std::string ifs = repeat("{% if true %}", 10000) + "x" + repeat("{% endif %}", 10000);
  REQUIRE_THROWS_MATCHES(Template::parse(ifs, "t"), sampan::Error, ErrorAt("t:1:3322: ", "template nested deeper than 256 levels"));
  // Deep but legal: 200 levels of each render as jinja2 does.
  CHECK(render("{{ " + repeat("(", 200) + "1" + repeat(")", 200) + " }}") == "1");
  CHECK(render("{{ " + repeat("[", 200) + "1" + repeat("]", 200) + " }}") == repeat("[", 200) + "1" + repeat("]", 200));
  CHECK(render("{{ " + repeat("not ", 200) + "false }}") == "False");
  CHECK(render("{{ 1" + repeat(" + 1", 200) + " }}") == "201");
  CHECK(render(repeat("{% if true %}", 200) + "x" + repeat("{% endif %}", 200)) == "x");
}

TEST_CASE("chat template macro recursion is bounded", "[chat][limits]") {
  REQUIRE_THROWS_MATCHES(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), sampan::Error,
                         ErrorAt("t:1:21: ", "maximum recursion depth exceeded calling macro 'f' (more than 100 nested calls)"));
  // caller() re-entering the macro that calls it.
  REQUIRE_THROWS_MATCHES(render("{% macro m() %}{{ caller() }}{% endmacro %}{% macro r() %}{% call m() %}{{ r() }}{% endcall %}{% endmacro %}{{ r() }}"),
                         sampan::Error, ErrorAt("t:1:", "maximum recursion depth exceeded calling macro"));
  CHECK(render("{% macro m(a) %}<{{ caller() }}{{ a }}>{% endmacro %}{% call m(1) %}body{% endcall %}") == "<body1>");
  // 100 nested calls are fine.
  std::string want;
  for (int n = 99; n > 0; --n) want += std::to_string(n) + ",";
  CHECK(render("{% macro f(n) %}{% if n > 0 %}{{ n }},{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(99) }}") == want);
}

TEST_CASE("chat template range() is bounded as jinja2's sandbox bounds it", "[chat][limits]") {
  REQUIRE_THROWS_MATCHES(render("{{ range(10**9) | length }}"), sampan::Error,
                         ErrorAt("t:1:9: ", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."));
  REQUIRE_THROWS_MATCHES(render("{{ range(-9223372036854775807, 9223372036854775807, 2) | length }}"), sampan::Error,
                         ErrorAt("t:1:9: ", "MAX_RANGE (100000)"));
  REQUIRE_THROWS_MATCHES(render("{{ range(100001) | length }}"), sampan::Error, ErrorAt("t:1:9: ", "Range too big"));
  CHECK(render("{{ range(100000) | length }}|{{ range(10, 0, -3) | list }}|{{ range(5, 5) | list }}") == "100000|[10, 7, 4, 1]|[]");
}

TEST_CASE("chat template rendering has a step budget", "[chat][limits]") {
  REQUIRE_THROWS_MATCHES(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), sampan::Error,
                         ErrorAt("t:1:", "template rendering exceeded its budget of 10000000 steps"));
  // Quadratic work inside builtins counts too: 'in' over a long list in a long loop.
  REQUIRE_THROWS_MATCHES(render("{% set l = range(100000) | list %}{% for i in l %}{% if -1 in l %}{% endif %}{% endfor %}"),
                         sampan::Error, ErrorAt("t:1:", "budget of 10000000 steps"));
  CHECK(render("{% set ns = namespace(n=0) %}{% for i in range(300) %}{% for j in range(300) %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}") ==
        "90000");
}

TEST_CASE("chat template strings, lists and output are bounded in size", "[chat][limits]") {
  REQUIRE_THROWS_MATCHES(render("{{ 'x' * 10**12 }}"), sampan::Error,
                         ErrorAt("t:1:8: ", "string of 1000000000000 bytes exceeds the limit of 16777216 bytes"));
  REQUIRE_THROWS_MATCHES(render("{{ ([1, 2] * 10**12) | length }}"), sampan::Error,
                         ErrorAt("t:1:12: ", "list of 2000000000000 items exceeds the limit of 1048576 items"));
  REQUIRE_THROWS_MATCHES(render("{{ ['x' * 10000000, 'y' * 10000000] | join }}"), sampan::Error,
                         ErrorAt("t:1:37: ", "exceeds the limit of 16777216 bytes"));
  REQUIRE_THROWS_MATCHES(render("{{ ('x' * 10000000).join(['a', 'b', 'c']) }}"), sampan::Error,
                         ErrorAt("t:1:", "exceeds the limit of 16777216 bytes"));
  REQUIRE_THROWS_MATCHES(render("{% set ns = namespace(s='x') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
                         sampan::Error, ErrorAt("t:1:", "string of 33554432 bytes exceeds the limit of 16777216 bytes"));
  REQUIRE_THROWS_MATCHES(render("{% set ns = namespace(s='x') %}{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
                         sampan::Error, ErrorAt("t:1:", "string of 33554432 bytes exceeds"));
  REQUIRE_THROWS_MATCHES(render("{% set ns = namespace(l=[1]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"),
                         sampan::Error, ErrorAt("t:1:", "list of 2097152 items exceeds"));
  REQUIRE_THROWS_MATCHES(render("{{ 'ab' | indent(10**12) }}"), sampan::Error, ErrorAt("t:1:9: ", "exceeds the limit"));
  REQUIRE_THROWS_MATCHES(render("{{ ('x' * 10000000) | replace('x', 'yy') }}"), sampan::Error, ErrorAt("t:1:", "exceeds the limit"));
  // The rendered output: 20 pieces of 1 MB.
  REQUIRE_THROWS_MATCHES(render("{% for i in range(20) %}{{ 'x' * 1000000 }}{% endfor %}"), sampan::Error,
                         ErrorAt("t:1:25: ", "exceeds the limit of 16777216 bytes"));
  // Integer arithmetic past 64 bits is refused, not wrapped (and never traps).
  expect_error([] { render("{{ 2 ** 64 }}"); }, sampan::ErrorCode::kUnsupported, "integer arithmetic beyond 64 bits");
  expect_error([] { render("{{ (-9223372036854775807 - 1) // -1 }}"); }, sampan::ErrorCode::kUnsupported, "beyond 64 bits");
  // Under the limits: exact results.
  CHECK(render("{{ ('ab' * 1000) | length }}|{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ 3 * 'x' }}|{{ 'x' * -2 }}|{{ 2 ** 62 }}|{{ (-2) ** 63 }}|{{ (-7) // -1 }}|{{ 7 % -1 }}") ==
        "2000|ababab|[1, 1, 1]|xxx||4611686018427387904|-9223372036854775808|7|0");
  CHECK(render("{{ ('x' * 16777216) | length }}") == "16777216");
  CHECK(render("{% for i in range(16) %}{{ 'x' * 1000000 }}{% endfor %}").size() == 16000000);
}

TEST_CASE("chat template values are bounded in depth", "[chat][limits]") {
  // A 100,000-deep JSON value from the client, built without recursion.
  auto deep = [](int levels) {
    nlohmann::ordered_json v = 1;
    for (int k = 0; k < levels; ++k) {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      a.push_back(std::move(v));
      v = std::move(a);
    }
    return v;
  };
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = deep(100000);
  REQUIRE_THROWS_MATCHES(render("{{ messages }}", vars), sampan::Error,
                         ErrorAt("t:1:1: ", "template variables: value nested deeper than 256 levels"));
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  for (int k = 0; k < 100000; ++k) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    o["a"] = std::move(obj);
    obj = std::move(o);
  }
  nlohmann::ordered_json tools_vars = nlohmann::ordered_json::object();
  tools_vars["tools"] = std::move(obj);
  REQUIRE_THROWS_MATCHES(Template::parse("x", "tpl").render(tools_vars), sampan::Error,
                         ErrorAt("tpl:1:1: ", "value nested deeper than 256 levels"));
  // Deep values built by the template: printing, tojson and comparing them stop at the limit,
  // and releasing a 100,000-deep value does not recurse.
  const std::string build = "{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  REQUIRE_THROWS_MATCHES(render(build + "{{ ns.x }}"), sampan::Error, ErrorAt("t:1:98: ", "value nested deeper than 256 levels"));
  REQUIRE_THROWS_MATCHES(render(build + "{{ ns.x | tojson }}"), sampan::Error, ErrorAt("t:1:", "value nested deeper than 256 levels"));
  REQUIRE_THROWS_MATCHES(render(build + "{{ ns.x == [ns.x] }}"), sampan::Error, ErrorAt("t:1:", "value nested deeper than 256 levels"));
  CHECK(render(build + "done") == "done");
  // 200 levels are fine both ways.
  vars["messages"] = deep(200);
  const std::string want = repeat("[", 200) + "1" + repeat("]", 200);
  CHECK(render("{{ messages }}|{{ messages | tojson }}|{{ messages == messages }}", vars) == want + "|" + want + "|True");
}
