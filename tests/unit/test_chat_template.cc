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
