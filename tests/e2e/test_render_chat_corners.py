"""`sampan render-chat` against Python jinja2 in the corners real chat templates reach.

Each case is a small template and the variables it sees (a fixed context, passed to sampan with
--vars, plus the case's own). jinja2 is configured as transformers configures it (the
reference_env of test_render_chat.py). Where jinja2 renders, sampan must print the same bytes;
where jinja2 raises, sampan must exit non-zero with exactly one "error:" line and print nothing.

The corners: filters and tests applied to None and to undefined values, attributes and items of
missing keys, loops over None, undefined values, strings and dicts and the `loop` variable,
conditions, `in`, comparisons and concatenation with None and undefined, namespace() and the
scoping of `set` inside loops, macros and blocks.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import RUN_TIMEOUT_S, Results, parse_args  # noqa: E402
from test_render_chat import FAKE_DATE, RaisedByTemplate, reference_env  # noqa: E402

# Every case sees these; `u` (and any other name not here) is undefined.
CONTEXT = {
    "n": None,
    "s": "abc",
    "es": "",
    "l": [1, 2, 3],
    "e": [],
    "d": {"b": 1, "a": 2},
    "ed": {},
    "t": True,
    "f": False,
    "z": 0,
    "words": ["b", "A", "a", "c", "B"],
    "msg": {"role": "user", "content": "hi"},
    "msgs": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi", "name": None},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "ok"},
    ],
}

# (template, extra variables or None). Grouped by the corner they probe.
CASES = [
    # --- select / reject / selectattr / rejectattr on None, undefined and real lists
    ("{{ n|select|list }}", None),
    ("{{ u|select|list }}", None),
    ("{{ n|reject|list }}", None),
    ("{{ u|reject('none')|list }}", None),
    ("{{ z|select|list }}", None),
    ("{{ 5|select|list }}", None),
    ("{{ es|select|list }}", None),
    ("{{ [0, 1, none, '', 2]|select|list }}", None),
    ("{{ [0, 1, none, 2]|reject('none')|list }}", None),
    ("{{ l|select('odd')|list }}", None),
    ("{{ l|reject('gt', 1)|list }}", None),
    ("{{ n|selectattr('role')|list }}", None),
    ("{{ u|selectattr('role')|list }}", None),
    ("{{ n|rejectattr('role')|list }}", None),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}", None),
    ("{{ msgs|selectattr('name')|list|length }}", None),
    ("{{ msgs|selectattr('tool_calls', 'defined')|map(attribute='role')|join(',') }}", None),
    ("{{ msgs|rejectattr('tool_calls', 'undefined')|map(attribute='role')|join(',') }}", None),
    ("{{ msgs|selectattr('content', 'none')|map(attribute='role')|join(',') }}", None),
    ("{{ msgs|rejectattr('content', 'none')|map(attribute='role')|join(',') }}", None),
    ("{{ msgs|selectattr('role', 'in', ['user', 'tool'])|list|length }}", None),
    ("{{ msgs|selectattr('content', 'string')|list|length }}", None),
    ("{{ msgs|selectattr('tool_calls')|first|attr('role') if false else 'x' }}", None),
    ("{{ msgs|selectattr('name', 'none')|list|length }}|{{ msgs|selectattr('name', 'undefined')|list|length }}"
     "|{{ msgs|rejectattr('name')|list|length }}|{{ msgs|selectattr('tool_calls', 'none')|list|length }}", None),
    ("{{ msgs|map(attribute='content')|select('string')|join('|') }}|"
     "{{ msgs|map(attribute='content')|reject('none')|list|length }}", None),
    ("{{ n|select('gt')|list }}|{{ e|selectattr()|list }}|{{ n|map()|list }}", None),
    ("{{ l|selectattr()|list }}", None),
    ("{{ l|map()|list }}", None),
    # --- map (attribute= and filter forms)
    ("{{ n|map('upper')|list }}", None),
    ("{{ u|map('upper')|list }}", None),
    ("{{ u|map(attribute='x')|list }}", None),
    ("{{ n|map(attribute='x')|list }}", None),
    ("{{ msgs|map(attribute='name')|list }}", None),
    ("{{ msgs|map(attribute='name', default='anon')|join(',') }}", None),
    ("{{ msgs|map(attribute='name')|join(',') }}", None),
    ("{{ msgs|map(attribute='role')|map('upper')|join(' ') }}", None),
    ("{{ msgs|map(attribute='tool_calls')|select('defined')|list|length }}", None),
    ("{{ [none, 1, '']|map('default', 'x')|list }}", None),
    ("{{ [none, 1, '']|map('default', 'x', true)|list }}", None),
    ("{{ l|map('string')|join('-') }}", None),
    ("{{ msgs|map(attribute='tool_calls.0.function.name')|list }}", None),
    ("{{ msgs|map(attribute='name')|list|tojson }}", None),
    # --- join
    ("{{ n|join(',') }}", None),
    ("{{ u|join(',') }}", None),
    ("{{ l|join }}", None),
    ("{{ [none, 1, 'a']|join(',') }}", None),
    ("{{ msgs|join(', ', attribute='role') }}", None),
    ("{{ s|join('.') }}", None),
    ("{{ d|join('|') }}", None),
    # --- length / count
    ("{{ n|length }}", None),
    ("{{ u|length }}", None),
    ("{{ n|count }}", None),
    ("{{ u|count }}", None),
    ("{{ s|length }}|{{ d|length }}|{{ e|length }}|{{ 'h\u00e9llo'|length }}", None),
    ("{{ 5|length }}", None),
    ("{{ msg.tool_calls|length }}", None),
    # --- default
    ("{{ n|default('x') }}", None),
    ("{{ n|default('x', true) }}", None),
    ("{{ u|default('x') }}", None),
    ("{{ u|default }}|{{ u|d('y') }}", None),
    ("{{ es|default('x') }}|{{ es|default('x', true) }}|{{ z|d('x', true) }}|{{ f|d('x', boolean=true) }}", None),
    ("{{ e|default([1], true) }}|{{ ed|default('x', true) }}", None),
    ("{{ msg.name|default('anon') }}|{{ msgs[1].name|default('anon') }}", None),
    ("{{ msg.tool_calls|default([])|length }}", None),
    ("{{ u|default(none) }}|{{ none|default('x') }}|{{ u|default(n)|default('x') }}|{{ n|string|default('x', true) }}",
     None),
    # --- first / last
    ("{{ n|first }}", None),
    ("{{ u|first }}", None),
    ("{{ e|first }}|{{ s|first }}|{{ l|first }}|{{ d|first }}", None),
    ("{{ n|last }}", None),
    ("{{ u|last }}", None),
    ("{{ e|last }}|{{ s|last }}|{{ l|last }}|{{ d|last }}", None),
    ("{{ (msgs|last).role }}|{{ (e|first) is defined }}|{{ msg|first }}", None),
    ("{{ (e|first).role is defined }}", None),
    ("{{ (msgs|selectattr('role', 'eq', 'nobody')|first) is defined }}|[{{ u|selectattr('x')|first }}]", None),
    ("{{ (msgs|selectattr('role', 'eq', 'nobody')|first).content }}", None),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|first }}", None),
    # --- list / string / trim / lower / upper
    ("{{ n|list }}", None),
    ("{{ u|list }}", None),
    ("{{ s|list }}|{{ d|list }}|{{ l|list }}", None),
    ("{{ n|string }}|{{ u|string }}|{{ (n|string) ~ '!' }}|{{ l|string }}|{{ [n]|string }}", None),
    ("{{ u|string|length }}|{{ n|string|length }}", None),
    ("{{ n|trim }}|{{ u|trim }}|{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}", None),
    ("{{ n|trim|length }}", None),
    ("{{ n|lower }}|{{ n|upper }}|{{ u|lower }}|{{ u|upper }}|{{ l|upper }}", None),
    ("{{ n|title }}|{{ n|capitalize }}|{{ u|title }}|{{ n|replace('o', '0') }}", None),
    ("{{ n|indent(2) }}", None),
    ("{{ u|indent(2) }}", None),
    # --- tojson
    ("{{ n|tojson }}", None),
    ("{{ u|tojson }}", None),
    ("{{ d|tojson }}|{{ msg|tojson }}", None),
    ("{{ msgs[2]|tojson(indent=2) }}", None),
    ("{{ {'a': none, 'b': [1, 'x', true, 1.5]}|tojson }}", None),
    ("{{ msg.tool_calls|tojson }}", None),
    ("{{ d|tojson(2) }}|{{ d|tojson(false, 2) }}|{{ {'\u00e9': '\u00fc\U0001F600'}|tojson(ensure_ascii=true) }}", None),
    ("{{ {'b': 1, 'a': {'d': 1, 'c': [1, {'z': 0, 'y': 1}]}}|tojson(sort_keys=true) }}|"
     "{{ {'b': 1, 'a': [1, 2]}|tojson(separators=(',', ':')) }}|{{ d|tojson(indent='\t') }}|{{ l|tojson(indent=0) }}",
     None),
    ("{{ -0.0 }}|{{ -0.0|tojson }}|{{ +(-0.0) }}|{{ -t }}|{{ -(-0.0) }}", None),
    # --- items / unique / sort / other filters on None and undefined
    ("{{ n|items|list }}", None),
    ("{{ u|items|list }}", None),
    ("{{ d|items|list }}", None),
    ("{% for k, v in msg|items %}{{ k }}={{ v }};{% endfor %}", None),
    ("{{ s|items|list }}", None),
    ("{{ n|unique|list }}", None),
    ("{{ u|unique|list }}", None),
    ("{{ words|unique|list }}|{{ words|unique(case_sensitive=true)|list }}", None),
    ("{{ msgs|unique(attribute='content')|list|length }}", None),
    ("{{ msgs|unique|list }}", None),
    ("{{ msgs|map(attribute=n)|map(attribute='role')|join(',') }}|{{ l|join(',', attribute=n) }}|"
     "{{ l|sort(attribute=n) }}|{{ l|sum(attribute=n) }}", None),
    ("{{ n|sort }}", None),
    ("{{ u|sort }}", None),
    ("{{ words|sort }}|{{ words|sort(reverse=true) }}|{{ words|sort(case_sensitive=true) }}", None),
    ("{{ d|sort }}|{{ s|sort }}", None),
    ("{{ msgs|sort(attribute='role')|map(attribute='role')|join(',') }}", None),
    ("{{ [1, none]|sort }}", None),
    ("{{ n|reverse }}", None),
    ("{{ l|reverse|list }}|{{ s|reverse }}", None),
    ("{{ n|sum }}", None),
    ("{{ u|sum }}|{{ l|sum }}", None),
    ("{{ n|min }}", None),
    ("{{ u|min }}|{{ u|max }}|{{ l|max }}", None),
    ("{{ n|int }}|{{ n|float }}|{{ n|int(7) }}|{{ 'x'|int }}|{{ '3'|float }}", None),
    ("{{ u|int }}", None),
    ("{{ u|float }}", None),
    ("{{ n|abs }}", None),
    ("{{ n|dictsort }}", None),
    ("{{ n|e }}|{{ u|e }}", None),
    ("{{ n|wordcount }}|{{ u|wordcount }}", None),
    ("{{ l|join(u) }}|{{ s|replace(u, 'x') }}|{{ l[u] }}|{{ d[n] }}|{{ s[n] }}|{{ l[1:n] }}|{{ l[n:2] }}", None),
    ("{{ l[u:] }}", None),
    ("{{ l['a':] }}", None),
    ("{{ s[:u] }}", None),
    ("{{ n[1:] }}", None),
    ("{{ u[1:] }}", None),
    ("{{ l[:t] }}|{{ s[n:n] }}|{{ l[-2:] }}", None),
    ("{{ u|list|length }}|{{ u|lower|length }}|{{ (n or '')|length }}|{{ msg|length }}", None),
    ("{{ t|length }}", None),
    # --- tests on missing attributes and items
    ("{{ msg.tool_calls is defined }}|{{ msg.tool_calls is undefined }}", None),
    ("{{ msg['missing'] is defined }}|{{ msg['role'] is defined }}", None),
    ("{{ msg.get('k') is none }}|{{ (msg.get('k')) is none }}|{{ msg.get('k', 1) is none }}", None),
    ("{{ u.bar is defined }}", None),
    ("{{ msg.foo.bar is defined }}", None),
    ("{{ u['x'] is defined }}", None),
    ("{{ n.x is defined }}|{{ n['x'] is defined }}|{{ s.x is defined }}|{{ l.x is defined }}", None),
    ("{{ n.x.y }}", None),
    ("{{ msgs[9] is defined }}|{{ msgs[-1] is defined }}|{{ s[10] is defined }}|{{ l['x'] is defined }}", None),
    ("{{ n is defined }}|{{ n is none }}|{{ u is none }}|{{ u is not defined }}|{{ z is none }}", None),
    ("{{ s is string }}|{{ n is string }}|{{ u is string }}|{{ msg.content is string }}", None),
    ("{{ d is mapping }}|{{ n is mapping }}|{{ u is mapping }}|{{ l is mapping }}", None),
    ("{{ msgs[2].tool_calls[0].function.arguments is mapping }}|{{ msg.tool_calls is mapping }}", None),
    ("{{ n is iterable }}|{{ u is iterable }}|{{ s is iterable }}|{{ d is iterable }}|{{ 1 is iterable }}", None),
    ("{{ n is sequence }}|{{ u is sequence }}|{{ s is sequence }}|{{ d is sequence }}|{{ 1 is sequence }}", None),
    ("{{ msg.tool_calls is iterable }}|{{ msg.tool_calls is sequence }}|{{ msg.tool_calls is string }}", None),
    ("{{ msgs[1].name is none }}|{{ msgs[0].name is none }}|{{ msgs[2].content is none }}", None),
    ("{{ u is callable }}|{{ msg.get is callable }}|{{ n is number }}|{{ t is number }}|{{ t is integer }}", None),
    ("{{ u is lower }}|{{ '123' is lower }}|{{ 'ab' is lower }}|{{ 'AB' is upper }}|{{ n is upper }}", None),
    ("{{ n is sameas none }}|{{ u is sameas none }}|{{ t is true }}|{{ n is false }}", None),
    ("{{ n is boolean }}|{{ f is boolean }}|{{ 1.0 is float }}|{{ n is eq none }}", None),
    ("{{ 'a' is in s }}|{{ 'x' is in d }}", None),
    ("{{ u is even }}", None),
    ("{{ u is integer }}|{{ u is boolean }}|{{ u is true }}|{{ u is number }}|{{ l[10] is string }}", None),
    ("{{ u is eq none }}|{{ u is in l }}|{{ n is in l }}|{{ n is not none }}|{{ u is not none }}", None),
    ("{{ u is gt 1 }}", None),
    ("{{ u is divisibleby(2) }}", None),
    ("{{ n.tool_calls is defined }}|{{ msgs[2].content.tool_calls is defined }}", None),
    ("{{ n.get('x') }}", None),
    ("{{ d.get('zz') }}|[{{ d.zz }}]|{{ msg.get('missing', none) }}|{{ d['zz']|default('x') }}|{{ msg.items()|list }}",
     None),
    # --- loops
    ("{% for x in n %}{{ x }}{% endfor %}", None),
    ("{% for x in n %}{{ x }}{% else %}empty{% endfor %}", None),
    ("{% for x in u %}{{ x }}{% else %}empty{% endfor %}", None),
    ("{% for t in msg.tool_calls %}x{% else %}none{% endfor %}", None),
    ("{% for x in msgs[2].content %}{{ x }}{% endfor %}", None),
    ("{% for x in 5 %}{{ x }}{% endfor %}", None),
    ("{% for c in s %}{{ c }}-{% endfor %}", None),
    ("{% for c in 'h\u00e9!' %}[{{ c }}]{% endfor %}", None),
    ("{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", None),
    ("{% for k in {'z': 1, 'a': 2, 'm': 3} %}{{ k }}{% endfor %}", None),
    ("{% for k in dict(z=1, a=2) %}{{ k }}{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list }}", None),
    ("{% for x in l %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}", None),
    ("{% for x in l %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }};{% endfor %}", None),
    ("{% for x in l %}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.cycle('a', 'b') }};{% endfor %}", None),
    ("{% for x in l %}{{ loop.index }}/{{ loop.revindex }}/{{ loop.index0 }}/{{ loop.revindex0 }} {% endfor %}", None),
    ("{% for x in l if x > 1 %}{{ loop.index }}:{{ x }}:{{ loop.length }}:{{ loop.previtem }} {% endfor %}", None),
    ("{% for x in e %}a{% else %}b{% endfor %}|{% for x in l if x > 5 %}a{% else %}b{% endfor %}", None),
    ("{% for m in msgs %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}", None),
    ("{% for x in l %}{% for y in s %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", None),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", None),
    ("{% for a, b in l %}{{ a }}{% endfor %}", None),
    ("{% for x in l %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", None),
    ("{% for x in l %}{% if x == 2 %}{% continue %}{% endfor %}{{ x }}{% endfor %}", None),
    ("{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}", None),
    ("{% for x in l %}{{ loop.changed(x % 2) }}{% endfor %}", None),
    ("{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", None),
    ("{% for x in l %}{{ loop.cycle() }}{% endfor %}", None),
    ("{% for x in l %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}|{{ loop }}|{{ loop is defined }}", None),
    ("{% for x in n or [] %}x{% else %}empty{% endfor %}", None),
    ("{% for x in l %}{% break %}{% else %}e{% endfor %}|"
     "{% for k, v in d.items() if v > 1 %}{{ k }}{% endfor %}", None),
    ("{% for x in l %}{% continue %}{% else %}e{% endfor %}|{% for x in l %}{% if x < 3 %}{% continue %}{% endif %}"
     "{% else %}e{% endfor %}|{% for x in l %}{% if x == 2 %}{% break %}{% endif %}{% else %}e{% endfor %}", None),
    ("{% for a in l %}{% set outer = loop %}{% for b in s %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}",
     None),
    ("{% for c in s|reverse %}{{ c }}{{ loop.last }}{% endfor %}|{% for x in (1, n) %}{{ x }}{% endfor %}", None),
    ("{% for i in range(u|length) %}x{% else %}none{% endfor %}|{{ range(3)|list }}", None),
    ("{% for x in n|default([]) %}x{% endfor %}", None),
    ("{% for x in u|default([]) %}x{% else %}e{% endfor %}", None),
    ("{% for m in msgs if m.tool_calls is defined %}{% for tc in m.tool_calls %}{{ tc.function.name }}"
     "({{ tc.function.arguments|tojson }}){% endfor %}{% endfor %}", None),
    # --- if, in, comparisons, concatenation, printing
    ("{% if u %}y{% else %}n{% endif %}{% if n %}y{% else %}n{% endif %}{% if e %}y{% else %}n{% endif %}"
     "{% if ed %}y{% else %}n{% endif %}{% if es %}y{% else %}n{% endif %}"
     "{% if msg.tool_calls %}y{% else %}n{% endif %}",
     None),
    ("{% if not u %}a{% endif %}{% if u is defined and u %}b{% elif n is none %}c{% endif %}", None),
    ("{{ 'a' in s }}|{{ 'x' not in s }}|{{ '' in es }}|{{ 'role' in msg }}|{{ 'x' in msg }}|{{ 2 in l }}", None),
    ("{{ 'a' in n }}", None),
    ("{{ 'a' not in n }}", None),
    ("{{ 'a' in u }}|{{ 'a' not in u }}", None),
    ("{{ n in l }}|{{ u in l }}|{{ n in [n] }}|{{ n not in e }}", None),
    ("{{ 1 in s }}", None),
    ("{{ n in s }}", None),
    ("{{ u in s }}", None),
    ("{{ 'b' in d }}|{{ 1 in d }}|{{ 'a' in d.keys() }}|{{ 2 in d.values() }}", None),
    ("{{ n == u }}|{{ u != u }}|{{ u != n }}|{{ n ~ none }}|{{ 1.0 ~ n }}|{{ t ~ f }}|{{ 1 < 2 < 3 }}|"
     "{{ 3 > 2 > 2 }}", None),
    ("{{ n <= n }}", None),
    ("{{ l <= l }}|{{ [1, 2] >= [1] }}|{{ 'a' <= 'a' }}|{{ 1 <= 1.0 }}", None),
    ("{{ [1, 2] + n }}", None),
    ("{{ n == none }}|{{ n != none }}|{{ u == none }}|{{ n == 0 }}|{{ u == u2 }}|{{ u == '' }}|{{ [n] == [n] }}", None),
    ("{{ n < 1 }}", None),
    ("{{ u < 1 }}", None),
    ("{{ n >= n }}", None),
    ("{{ 'x' ~ n }}|{{ 'x' ~ u }}|{{ n ~ u }}|{{ u ~ n ~ 1 }}|{{ l ~ d }}", None),
    ("{{ 'x' + n }}", None),
    ("{{ 'x' + u }}", None),
    ("{{ u + 1 }}", None),
    ("[{{ u }}]|{{ n }}|[{{ msg.missing }}]|{{ n.x }}|{{ n['x'] }}|{{ s.missing }}", None),
    ("{{ u.x }}", None),
    ("{{ u['x'] }}", None),
    ("{{ u[0] }}", None),
    ("{{ u.strip() }}", None),
    ("{{ u() }}", None),
    ("{{ n() }}", None),
    ("{{ n[0] }}|{{ s[10] }}|{{ l[10] }}|{{ s[-1] }}|{{ msg['role'] }}", None),
    ("{{ n is none and 'y' or 'n' }}|{{ 1 if u else 2 }}|{{ u or 'fb' }}|{{ n or 'fb' }}|{{ n and 1 }}|[{{ u and 1 }}]",
     None),
    ("{{ not u }}|{{ not n }}|{{ not e }}", None),
    ("{{ [n, t, 1.5, 'x', f] }}|{{ msg }}|{{ (1, n) }}|{{ (n,) }}", None),
    ("{{ msgs|map(attribute='name')|list|string }}", None),
    ("{{ None }}|{{ True }}|{{ none is none }}|{{ true is true }}", None),
    ("[{{ 'a' if false }}]|{{ ('a' if false) is defined }}", None),
    ("{{ msg.content.strip() }}|{{ msg['content'].upper() }}|{{ msg.get('role') }}", None),
    ("{% if msg.content is string and msg.content|length > 0 %}ok{% endif %}", None),
    ("{% if msg.tool_calls is defined and msg.tool_calls %}tc{% else %}no{% endif %}", None),
    # --- namespace() and set scoping
    ("{% set ns = namespace(found=false) %}{% for m in msgs %}{% if m.role == 'tool' %}{% set ns.found = true %}"
     "{% endif %}{% endfor %}{{ ns.found }}", None),
    ("{% set ns = namespace(n=0) %}{% for i in l %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", None),
    ("{% set ns = namespace(items=[]) %}{% for i in l %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.items }}",
     None),
    ("{% set ns = namespace(c=0) %}{% for m in msgs if m.role != 'system' %}{% set ns.c = ns.c + 1 %}{% endfor %}"
     "{{ ns.c }}", None),
    ("{% set ns = namespace() %}[{{ ns.missing }}]|{{ ns.missing is defined }}", None),
    ("{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}|{{ namespace(x=1).x }}", None),
    ("{% set ns = namespace(a=[], d=d) %}{{ ns.a is sequence }}|{{ ns.d.a }}|{{ ns['d'] is mapping }}"
     "|{{ ns is mapping }}|{{ ns is iterable }}|{{ ns is defined }}", None),
    ("{% set ns = namespace(a=1, b='x') %}{{ ns }}", None),
    ("{% set ns = namespace(a=1) %}{{ ns|length }}", None),
    ("{% set ns = namespace(a=1) %}{% for x in ns %}{{ x }}{% endfor %}", None),
    ("{% set ns = namespace(a=none) %}{{ ns.a is none }}|{{ ns.a is defined }}", None),
    ("{% set ns = namespace(last='') %}{% for m in msgs %}{% set ns.last = m.role %}{% endfor %}{{ ns.last }}", None),
    ("{% set x = 1 %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}", None),
    ("{% for i in l %}{% set y = i %}{{ y }}{% endfor %}[{{ y }}]", None),
    ("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", None),
    ("{% set x = 'outer' %}{% for i in l %}{{ x }}{% set x = i %}{{ x }};{% endfor %}{{ x }}", None),
    ("{% for i in l %}{% set x = (x or 0) + i %}{{ x }},{% endfor %}[{{ x }}]", None),
    ("{% for i in l %}{% if i == 2 %}{% set found = i %}{% endif %}{% endfor %}[{{ found }}]", None),
    ("{% for i in l %}{% if i == 1 %}{% set first = i %}{% endif %}{{ first }};{% endfor %}", None),
    ("{% for i in l %}{% for j in l %}{% set k = j %}{% endfor %}[{{ k }}]{% endfor %}", None),
    ("{% set x = 5 %}{% for i in l %}{% for j in l %}{% set x = j %}{% endfor %}{{ x }}{% endfor %}", None),
    ("{% macro m(a) %}{{ a }}{{ b }}{% set z = 1 %}{% endmacro %}{% set b = 2 %}{{ m(1) }}[{{ z }}]", None),
    ("{% macro m(a, b='d') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(n) }}|{{ m(u) }}|"
     "{{ m(1, c=3) if false else m(1) }}",
     None),
    ("{% set x %}a{{ u }}{{ n }}b{% endset %}{{ x }}", None),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}", None),
    ("{% set a, b = n %}{{ a }}", None),
    ("{% set a, b = 'xy' %}{{ b }}{{ a }}", None),
    ("{% set l = l + [4] %}{{ l }}|{% for i in l %}{% set l = [] %}{% endfor %}{{ l|length }}", None),
    ("{% set ns = namespace(s='') %}{% for k, v in d.items() %}{% set ns.s = ns.s ~ k ~ v %}{% endfor %}{{ ns.s }}",
     None),
    ("{% set ns.x = 1 %}", None),
    ("{% set n.x = 1 %}", None),
    # --- idioms of real chat templates around None and missing keys
    ("{{ not u is defined }}|{{ not n is none }}|{% if not tools is none %}t{% else %}f{% endif %}", None),
    ("{% for m in msgs %}{{ m.content if m.content is string else m.content|selectattr('type', 'equalto', 'text')"
     "|map(attribute='text')|join('') }};{% endfor %}", None),
    ("{% for m in msgs|rejectattr('role', 'equalto', 'tool')|selectattr('tool_calls', 'undefined') %}{{ m.role }};"
     "{% endfor %}", None),
    ("{% for m in msgs %}{% if m.tool_calls is defined and m.tool_calls is not none %}{% for tc in m.tool_calls %}"
     "{% if tc.function is defined %}{% set tc = tc.function %}{% endif %}{{ tc.name }}:{{ tc.arguments|tojson }}"
     "{% endfor %}{% endif %}{% endfor %}", None),
    ("{{ {'items': 1}.items is callable }}|{{ {'items': 1}['items'] }}|{{ {'get': 2}.get('get') }}", None),
    ("{% for k, v in {'p': {'type': 'string'}, 'q': {'type': ['a', 'b']}}|items %}{{ k }}:"
     "{{ v.type if v.type is string else v.type|join('|') }};{% endfor %}", None),
    ("{{ l[::-1] }}|{{ s[::-1] }}|{{ l[::2] }}|{{ l[-1:0:-1] }}|{{ msgs[1:]|length }}|{{ e[1:] }}", None),
    ("{% for m in msgs[::-1] %}{% set index = (msgs|length - 1) - loop.index0 %}{{ index }}{{ m.role[0] }}"
     "{% endfor %}", None),
    ("{% if controls and 'citations' in controls %}c{% endif %}{% if 'citations' in controls %}d{% endif %}ok", None),
    ("{{ (msgs[0]['content'] if msgs else '')|trim }}|{{ (e[0]['content'] if e else 'none') }}", None),
    ("{{ e[0]['role'] }}", None),
    ("{% if e[0] is defined and e[0]['role'] == 'system' %}s{% else %}n{% endif %}", None),
    ("{{ msgs|map(attribute='content')|map('tojson')|join(',') }}|{{ [' a ', 'b ']|map('trim')|join }}", None),
    ("{{ msg.tool_calls|default([], true)|length }}|{{ (msg.tool_calls or [])|length }}", None),
    ("{{ msgs[2].content.startswith('x') }}", None),
    ("{{ 'x' in msgs[2].content }}", None),
    ("{% set content = msgs[2].content or '' %}{{ '</think>' in content }}|{{ content.split('</think>')[-1] }}", None),
    ("{% for m in msgs %}{{ loop.index0 // 2 }}{{ (m.role == 'user') != (loop.index0 % 2 == 0) }};{% endfor %}", None),
    ("{% for d2 in docs %}{{ 'Document ' ~ loop.index ~ ':' }}{% for k, v in d2.items() %}{{ k }}={{ v }} {% endfor %}"
     "{% endfor %}", {"docs": [{"title": "t", "text": None}, {"text": "x"}]}),
    # --- str and dict methods take only what Python's take (no str() of None or undefined)
    ("{{ s.replace('b', n) }}", None),
    ("{{ s.replace('b', u) }}", None),
    ("{{ s|replace('b', n) }}|{{ s|replace(u, 'x') }}|{{ 123|replace(2, 9) }}", None),
    ("{{ ', '.join(['a', n]) }}", None),
    ("{{ ', '.join(u) }}", None),
    ("{{ ', '.join(['a', 'b']) }}|{{ '-'.join(d) }}|{{ s.split(n) }}|{{ s.strip(n) }}|{{ s|trim(n) }}", None),
    ("{{ s.strip(u) }}", None),
    ("{{ s|trim(u) }}", None),
    ("{{ s.find(n) }}", None),
    ("{{ s.startswith(('a', n)) }}", None),
    ("{{ msg.get() }}", None),
    ("{{ msg.get('a', 'b', 'c') }}", None),
    ("{{ [1] < (1, 2) }}", None),
    # --- raise_exception reached through these corners
    ("{% if msgs[1].name is none %}{{ raise_exception('name is None') }}{% endif %}", None),
    ("{% for m in msgs %}{% if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
     "{{ raise_exception('bad role ' ~ m.role) }}{% endif %}{% endfor %}ok", {"extra": 1}),
    ("{% for m in msgs %}{% if m.role not in ['system', 'user'] %}"
     "{{ raise_exception('bad role ' ~ m.role) }}{% endif %}{% endfor %}ok", None),
]


def main():
    args = parse_args(__doc__)
    res = Results()
    try:
        env = reference_env()
    except ImportError as e:
        res.check("python jinja2 available (scripts/setup.sh installs it)", False, str(e))
        res.finish()
    work = os.path.join(args.work_dir, "render_chat_corners")
    os.makedirs(work, exist_ok=True)
    run_env = dict(os.environ, SAMPAN_FAKE_DATE=FAKE_DATE)
    for i, (source, extra) in enumerate(CASES):
        variables = dict(CONTEXT, **(extra or {}))
        expected, raised, from_template = None, None, False
        try:
            expected = env.from_string(source).render(**variables)
        except RaisedByTemplate as e:
            raised, from_template = str(e), True
        except Exception as e:  # noqa: BLE001 - whatever jinja2 raises, sampan must reject too
            raised = f"{type(e).__name__}: {e}"
        tpath = os.path.join(work, f"case{i}.jinja")
        vpath = os.path.join(work, f"case{i}.vars.json")
        with open(tpath, "w", encoding="utf-8") as fh:
            fh.write(source)
        with open(vpath, "w", encoding="utf-8") as fh:
            json.dump(variables, fh, ensure_ascii=False)
        r = subprocess.run([args.sampan, "render-chat", "--template", tpath, "--vars", vpath],
                           capture_output=True, timeout=RUN_TIMEOUT_S, env=run_env)
        stderr = r.stderr.decode("utf-8", "replace")
        got = r.stdout.decode("utf-8", "replace")
        label = f"#{i} {source!r}"
        if raised is None:
            ok = r.returncode == 0 and got == expected
            why = f"exit {r.returncode}, stderr {stderr.strip()!r}" if r.returncode else \
                f"expected {expected!r}, got {got!r}"
            res.check(label, ok, "" if ok else why)
        else:
            lines = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
            ok = (r.returncode != 0 and len(lines) == 1 and r.stdout == b""
                  and (not from_template or raised in lines[0]))
            why = f"reference raised {raised!r}; sampan exit {r.returncode}, stdout {got!r}, stderr {stderr.strip()!r}"
            res.check(label + " (both reject)" if ok else label, ok, "" if ok else why)
    res.finish()


if __name__ == "__main__":
    main()
