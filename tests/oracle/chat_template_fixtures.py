#!/usr/bin/env python3
"""tests/oracle/chat_template_fixtures.py - make the chat-template fixtures ONCE.

Renders every template in tests/fixtures/chat/templates/*.jinja over a set of
conversations with Python's jinja2 exactly as Hugging Face transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks=True,
lstrip_blocks=True, the loopcontrols extension, HF's {% generation %} tag,
HF's tojson, raise_exception, strftime_now) and writes
tests/fixtures/chat/renders.json. The C unit test
(tests/unit/text/test_jinja.c) renders the same templates with
text/jinja.c and compares byte for byte. jinja2 is NOT needed at
`make test` time.

Variables, as apply_chat_template passes them with no tools/documents:
messages, add_generation_prompt, bos_token, eos_token, tools=None,
documents=None. strftime_now formats the fixed instant NOW (UTC).

Usage (throwaway venv, pinned jinja2):
  python3 -m venv /work/venv-jinja && /work/venv-jinja/bin/pip install jinja2==3.1.6
  /work/venv-jinja/bin/python tests/oracle/chat_template_fixtures.py
Where each template comes from: tests/fixtures/chat/NOTES.md.
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TDIR = os.path.join(ROOT, "tests", "fixtures", "chat", "templates")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat", "renders.json")
OUT_SNIPPETS = os.path.join(ROOT, "tests", "fixtures", "chat", "snippets.json")
NOW = datetime.datetime(2026, 1, 15, 9, 30, 0, tzinfo=datetime.timezone.utc)

# bos_token / eos_token texts by template-name prefix (the family's tokenizer);
# first match wins, default ("<s>", "</s>").
SPECIALS = [
    ("meta-llama-Llama-2", "<s>", "</s>"),
    ("meta-llama-", "<|begin_of_text|>", "<|eot_id|>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("deepseek-ai-", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("llama-cpp-deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("google-", "<bos>", "<eos>"),
    ("Qwen", "<|endoftext|>", "<|im_end|>"),
    ("HuggingFaceTB-SmolLM2", "<|im_start|>", "<|im_end|>"),
    ("HuggingFaceTB-SmolLM3", "<|im_start|>", "<|im_end|>"),
    ("guidance-chatml", "<|im_start|>", "<|im_end|>"),
    ("microsoft-Phi-3", "<s>", "<|endoftext|>"),
    ("llama-cpp-microsoft-Phi-4", "<|endoftext|>", "<|endoftext|>"),
    ("ibm-granite", "<|end_of_text|>", "<|end_of_text|>"),
    ("NousResearch-", "<|begin_of_text|>", "<|im_end|>"),
    ("fireworks-ai-", "<|begin_of_text|>", "<|eot_id|>"),
    ("meetkai-", "<|begin_of_text|>", "<|eot_id|>"),
    ("CohereForAI-", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("NVIDIA-", "<SPECIAL_10>", "<SPECIAL_11>"),
    ("openai-", "<|startoftext|>", "<|return|>"),
]

CONVS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "  Hi there \n"}, {"role": "assistant", "content": " Hello! How can I help? "},
     {"role": "user", "content": "Tell me a joke.\n\nA short one."}],
    [{"role": "system", "content": "Be nice.\n"}, {"role": "user", "content": "héllo 🦙 <b>x</b> \"q\" {{ x }}"},
     {"role": "assistant", "content": "Hi 😀"}, {"role": "user", "content": "Again?"}],
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nParis."}],
    [{"role": "user", "content": ""}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"},
     {"role": "user", "content": "U2"}, {"role": "assistant", "content": "A2"}],
]


# Small templates, one feature each, rendered with VARS (plus the HF globals).
VARS = {
    "x": {"b": [1, 2.5, "é😀", None], "a": None, "c": True, "d": {"k": "v\n\"q\""}, "e": [], "f": {}},
    "s": "  Hello wORLD-foo (bar) \n",
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nyo"}],
    "n": 7, "fl": 2.0, "neg": -3,
    "items": [{"name": "b", "v": 2}, {"name": "A", "v": 1}, {"name": "c", "v": None}],
    "words": ["b", "A", "c", "a", "b"],
    "text": "line one\n\nline three\n",
}
SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, the final newline
    "{% if true %}\n  x\n{% endif %}\n",
    "  {%- if true -%}  a  {%- endif -%}  b",
    "  {%+ if true %}x{% endif %}",
    "a\n  {# c #}\nb",
    "a {#- c -#} b",
    "{% if true +%}\nx{% endif %}",
    "line\n    {% for i in [1, 2] %}\n    {{ i }}\n    {% endfor %}\n",
    "x\n\n",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "  {{- 'a' -}}  \n  {{ 'b' }}",
    "\t{% set z = 1 %}\t|{{ z }}",
    "a\r\nb{% if true %}\r\nc{% endif %}",
    # numbers and Python str()
    "{{ 1 }} {{ 1.5 }} {{ -3 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}",
    "{{ 1 / 3 }} {{ 1e20 }} {{ 1e-7 }} {{ 123456789.0 * 1000000000 }} {{ 1e16 }} {{ 0.0001 }} {{ 2.5 * 2 }} {{ 1_000 }}",
    "{{ fl }} {{ neg }} {{ -neg }} {{ n * 'ab' }} {{ 7.0 // 2 }} {{ 7.5 % 2 }} {{ 2 ** -1 }}",
    "{{ [1, 'a', none, true, 1.0] }} {{ {'a': 1, 'b': [2]} }} {{ ('x',) }} {{ (1, 2) }} {{ [\"it's\", 'q\"', 'a\\nb'] }}",
    "{{ true }} {{ none }} {{ x.a }} {{ x }}",
    # string literals
    "{{ 'a\\nb\\t|\\'|\\\"|\\\\|\\u00e9|\\x41|\\U0001F600|\\q' }} {{ \"x\" 'y' }}",
    # tojson as HF defines it
    "{{ x | tojson }}",
    "{{ x | tojson(indent=2) }}",
    "{{ x | tojson(separators=(',', ':')) }}",
    "{{ x | tojson(sort_keys=true, indent=1) }}",
    "{{ x | tojson(ensure_ascii=true) }}",
    "{{ 'é\\n\"\\u0001\\\\' | tojson }} {{ 1.0 | tojson }} {{ [] | tojson(indent=4) }} {{ none | tojson }} {{ items | tojson }}",
    "{{ msgs | tojson(indent='\\t') }}",
    # filters
    "[{{ s | trim }}] [{{ s | upper }}] [{{ s | lower }}] [{{ s | capitalize }}] [{{ s | title }}] [{{ s | trim('\\n ') }}]",
    "{{ 'héllo😀' | length }} {{ words | length }} {{ x | length }} {{ words | count }} {{ 'abc' | first }} {{ words | last }} {{ x | first }}",
    "{{ words | join }} {{ words | join(', ') }} {{ items | join('/', attribute='name') }} {{ [1, none, 2.5] | join('-') }}",
    "{{ s | replace('o', '0') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'ab' | replace('', '-') }}",
    "{{ undefined_thing | default('d') }} {{ '' | default('e') }} {{ '' | default('f', true) }} {{ none | default('g') }} {{ n | d(3) }}",
    "{% for k, v in x | items %}{{ k }}={{ v }};{% endfor %} {{ u | items | list }}",
    "{{ n | string }}{{ '42' | int + 1 }} {{ '3.9' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ 'x' | int(5) }} {{ '2.5' | float }} {{ 'q' | float }} {{ n | float }}",
    "{{ 'abc' | list }} {{ 'héllo' | reverse }} {{ words | reverse | list }} {{ x | list }}",
    "{{ items | selectattr('v') | map(attribute='name') | list }} {{ items | rejectattr('v', 'none') | list | length }}",
    "{{ items | selectattr('name', 'equalto', 'A') | list }} {{ msgs | selectattr('role', '==', 'user') | map(attribute='content') | join }}",
    "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ [0, 1, none, ''] | select | list }}",
    "{{ words | map('upper') | list }} {{ words | unique | list }} {{ words | sort | list }} {{ words | sort(reverse=true, case_sensitive=true) | list }}",
    "{{ items | sort(attribute='name') | map(attribute='name') | join }} {{ x.d | dictsort }} {{ [3, 1, 2] | sum }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }}",
    "{{ -3 | abs }} {{ neg | abs }} {{ 2.675 | round(2) }} {{ 3.5 | round }} {{ 2.4 | round(0, 'ceil') }} {{ '<a href=\"x\">&</a>' | e }} {{ 'a b, c' | wordcount }}",
    "[{{ text | indent }}] [{{ text | indent(2, true) }}] [{{ text | indent(first=true, blank=true) }}]",
    "{% filter upper %}ab{{ 'c' }}{% endfilter %}|{% filter trim | replace('x', 'y') %}  x  {% endfilter %}",
    # tests
    "{{ u is defined }} {{ n is defined }} {{ u is undefined }} {{ none is none }} {{ s is string }} {{ x is mapping }} {{ words is sequence }} {{ 'a' is iterable }} {{ n is iterable }}",
    "{{ n is number }} {{ n is integer }} {{ fl is float }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ 'ab' is lower }} {{ 'AB' is upper }}",
    "{{ n is eq 7 }} {{ n is ne 7 }} {{ n is lt 8 }} {{ n is gt(8) }} {{ 'a' is in words }} {{ none is sameas none }} {{ n is equalto 7 }} {{ x.a is not none }} {{ not x.a is none }}",
    # string methods
    "{{ s.startswith(('  H', 'x')) }} {{ s.endswith('\\n') }} [{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip('\\n') }}] [{{ 'xxaxx'.strip('x') }}]",
    "{{ 'a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ ' a b c '.split(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a,b,c'.split(',', 1) }}",
    "{{ msgs[1].content.split('</think>')[-1].lstrip('\\n') }}|{{ msgs[1].content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
    "{{ s.replace('o', '0', 1) }} {{ 'héllo wörld'.upper() }} {{ 'ÉCOLE'.lower() }} {{ \"they're bill's\".title() }} {{ 'hELLO'.capitalize() }}",
    "{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ ', '.join(words) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '{} and {name}'.format(1, name='x') }} {{ '12'.isdigit() }}",
    # dicts
    "{{ x.get('a') }} {{ x.get('zz') }} {{ x.get('zz', 5) }} {{ x.d.k }} {{ x['d']['k'] }} {{ x.keys() | list }} {{ x.d.values() | list }} {{ x.items() | list | length }}",
    # indexing and slicing
    "{{ words[0] }} {{ words[-1] }} {{ words[10] }} {{ words[1:] }} {{ words[:-1] }} {{ words[::-1] }} {{ words[::2] }} {{ words[-2:] }} {{ 'héllo'[1:3] }} {{ 'héllo'[-1] }} {{ words.0 }}",
    "{{ msgs[::-1] | map(attribute='role') | join }} {{ msgs[1:] | length }} {{ 'abc'[5:] }}|{{ words[3:1] }}",
    # loops
    "{% for w in words %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for w in words %}{{ loop.previtem }}>{{ w }}>{{ loop.nextitem }}|{{ loop.cycle('o', 'e') }} {% endfor %}",
    "{% for w in words if w != 'b' %}{{ loop.index }}/{{ loop.length }}:{{ w }} {% else %}none{% endfor %}{% for w in [] %}x{% else %}empty{% endfor %}",
    "{% for k, v in x.d.items() %}{{ k }}{{ v }}{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}",
    "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %} {{ range(2, 10, 3) | list }} {{ range(3, 0, -1) | list }}",
    "{% for m in msgs %}{% for c in m.role %}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}",
    # scoping
    "{% set c = 0 %}{% for i in [1, 2, 3] %}{% set c = c + i %}{{ c }}{% endfor %}|{{ c }}",
    "{% set ns = namespace(c=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }} {{ ns.found }}",
    "{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }} {% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = [1, 2] %}{{ t }}",
    "{% set x2 %}a{{ 1 + 1 }}b{% endset %}[{{ x2 }}] {% set q = 'q' %}{% for i in [1] %}{{ q }}{% set q = 'r' %}{{ q }}{% endfor %}{{ q }}",
    # macros
    "{% macro m(a, b='B', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m('x') | length }}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k }}*{{ fact(k - 1) }}{% endif %}{% endmacro %}{{ fact(5) }} {% set g = 'G' %}{% macro h() %}{{ g }}{% endmacro %}{{ h() }}",
    # expressions
    "{{ 'a' if n > 3 }}|{{ 'a' if n < 3 }}|{{ 'y' if n else 'n' }} {{ 'b' in 'abc' }} {{ 'z' not in words }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 4 }} {{ n ~ none ~ 1.5 }}",
    "{{ n and 'x' }} {{ 0 or 'y' }} {{ none or [] }} {{ not n }} {{ (n + 1) * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ n == 7.0 }} {{ true == 1 }} {{ [1, 2] == [1, 2] }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}",
    "{{ {'a': 1}['a'] }} {{ x.b[2] }} {{ (x.b | last) is none }} {{ msgs | length > 1 }} {{ msgs[0]['role'] | upper }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %b %B %a %A %d %j') }} {{ bos_token }}{{ eos_token }}",
    "{% set d = dict(a=1, b=[2]) %}{{ d }} {{ namespace(z=1).z }}",
    "{% generation %}gen{{ 1 }}{% endgeneration %}",
    # errors (must fail in both)
    "{{ u.x }}",
    "{{ 1 + 'a' }}",
    "{{ raise_exception('boom: ' ~ n) }}",
    "{{ u + 1 }}",
    "{{ 1 // 0 }}",
    "{% for a, b in [1] %}{% endfor %}",
    "{{ 'a' in 1 }}",
    "{% set x3 = 1 %}{% set x3.y = 2 %}",
]

# found by differential runs against jinja2 while writing the interpreter
SNIPPETS += [
    '{% for i in range(3) %}{% set x = i %}{% endfor %}[{{ x }}]',
    "{{ [1,2,3][1:] | join(',') }}",
    "{{ 'abc' * 2 }} {{ none ~ '' }} {{ -0.0 }} {{ 1e100 }} {{ 3.0 == 3 }}",
    "{{ {'a':1} | tojson(indent=2) }}",
    '{% if x is not defined %}u{% endif %}{{ x | default(none) is none }}',
    "{{ 'a' ~ 1 ~ true }}",
    "{{ msgs | selectattr('role', 'in', ['user']) | list | length }}",
    "{{ 'x'.join(['a','b']) }} {{ [3,1,2] | sort | first }} {{ (1, 2) | list }}",
    '{%- for m in msgs -%}\n  {{ m.role }}\n{%- endfor %}',
    "{{ '  a  ' | trim | length }} {{ msgs[0].get('content') }} {{ msgs[0]['nope'] is defined }} {{ none is not none }}",
    "{{ true and none }} {{ [] or 'e' }} {{ 5 // 2 * 2 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 == 2 }}",
    "{{ 1 if true else 2 if false else 3 }} {{ 'a' is string and 'b' }}",
    "{% set l = [1,2] %}{{ l[5] is defined }} {{ range(3) | reverse | list }} {{ 'Hello'[::-1] }} {{ '%s' }}",
    "{{ 'a' < 1 }}",
    "{{ [1,'a'] | sort }}",
    '{{ 10 % 3 }} {{ -10 % 3 }} {{ 10 % -3 }} {{ 10.5 % 3 }} {{ -7.5 // 2 }}',
    '{{ 7 / 0 }}',
    "{{ 1.5 | int }} {{ -1.5 | int }} {{ '0x10' | int }} {{ '1_000' | int }} {{ ' 12 ' | int }} {{ 'inf' | int }} {{ 'nan' | float }} {{ '1e3' | int }}",
    "{{ '0x10' | float }} {{ 'inf' | float }} {{ '-1.5e2' | float }} {{ true | int }} {{ none | int }}",
    "{{ msgs[0] }} {{ msgs[0].items() | list }} {{ msgs | map(attribute='role') | list }}",
    '{{ msgs | first }} {{ msgs | last | tojson }}',
    "{{ 'a,b'.split(',') | tojson }} {{ [1, 2.0, 'x'] | tojson(separators=(',', ':')) }}",
    "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %} {{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}",
    "{{ 'abc'[1] }} {{ 'abc'[-4] }} {{ [1,2][-3] }}",
    '{% for x in [1] %}{{ loop.length }}{{ loop.depth }}{% endfor %}',
    '{% macro m() %}x{% endmacro %}{{ m }}',
    '{{ 1 is divisibleby(0) }}',
    '{{ undefined_var.x is defined }}',
    '{{ none.x }}|{{ (none).x is defined }}',
    "{{ 'ab' in msgs[0] }} {{ 'role' in msgs[0] }} {{ 1 in [1.0] }}",
    "{{ 'é' | upper }} {{ 'ß' | upper }} {{ 'ßa' | title }} {{ 'ÀÉÎ' | lower }} {{ 'привет мир' | title }} {{ 'αβγ' | upper }}",
    '{{ "they\'re" | title }} {{ \'hello world\' | capitalize }} {{ \'a-b c(d\' | title }}',
    "{{ 'a\\tb' | wordcount }} {{ '' | wordcount }}",
    "{{ [none, 1] | select('none') | list }} {{ [1, 2] | map('string') | join('+') }}",
    "{{ [{'a': 1}, {}] | map(attribute='a', default=0) | list }}",
    "{{ 1 ~ 2 + 3 }} {{ 'a' ~ 'b' | upper }}",
    "{{ ('a', 'b') }} {{ ('a',) | tojson }} {{ () }}",
    "{% set a = 'x' %}{% set b = a ~ 'y' %}{{ b }}",
    "{{ {1: 'a', true: 'b'} }}",
    "{{ {1: 'a'} | tojson }} {{ {none: 1} | tojson }} {{ {1.5: 1} | tojson }}",
    "{{ 'x' if 0 }}|{{ ('x' if 0) is defined }}",
    '{{ -msgs | length }}',
    "{{ 'abc' | replace('b', none) }}",
    "{{ 'x' | join }}",
    '{{ 3 | string | length }}',
    '{{ [1, [2, [3]]] | tojson(indent=1) }}',
    '{{ 0.1 | tojson }} {{ 1e16 | tojson }} {{ 100.0 | tojson }} {{ -1e-5 | tojson }}',
    '{%- if true %}  a  {%- endif %}',
    '  {%- if true -%}\n\n  b  \n\n{%- endif -%}  \n',
    '{% for i in [1,2] %}\n{{ i }}\n{% endfor %}\n',
    '{% raw %}x{% endraw %}',
    '{% raw %}{{ x }}{% endraw %}',
    'a\n  {% raw %}\n  {{ y }}\n  {% endraw %}\nb',
    'a {%- raw -%}  {{ z }}  {%- endraw -%} b',
    '{% raw +%}\nq{%+ endraw %}\n',
    'x {%+ raw %} y {% endraw +%}\nz',
    '{%- set x = 1 -%}\n\n\n{{ x }}',
    '  {# comment #}\n  x',
    '  {#- c #}  y',
    '{% if true %}\n{% endif %}\n\n',
    "{{ 'a' }}{# c #}\n{{ 'b' }}",
    '\n\n{% for i in [1] -%}\n  a\n{%- endfor %}\n\n',
    '    {%- if true %}\n    x\n    {%- endif %}',
    '{% for i in [1,2] %}{{ i }}{% if not loop.last %},{% endif %}{% endfor %}',
    '  \\t{% if true %}x{% endif %}',
    'a\\t {% if true %}x{% endif %}',
    "{{- ' x ' -}}",
    "{% set a = [1, 2,] %}{{ a }} {{ {'k': 1,} }}",
    '{{ \'a\' \'b\' "c" }}',
    '{{ "it\'s" }} {{ \'say "hi"\' }} {{ ["it\'s"] }} {{ [\'say "hi"\'] }} {{ [\'both \\\' "\'] }}',
    "{{ ['\\x00\\x7f\\u00e9\n'] }}",
    '{{ 1 == 1 == 1 }} {{ 1 != 2 != 1 }}',
    "{% for a, b in {'x': 1}.items() %}{{ a }}{{ b }}{% endfor %}",
    "{% for x in 'ab' %}{{ x }}{% endfor %}",
    '{% for x in none %}{% endfor %}',
    '{% for x in 5 %}{% endfor %}',
    "{{ msgs | map(attribute='role') | map('upper') | join(' ') }}",
    "{{ msgs | selectattr('role', 'eq', 'user') | first }}",
    "{{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='content') | first }}",
    "{{ (msgs | selectattr('role', 'equalto', 'tool') | list) | length }}",
    '{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }} {{ ns.b }}',
    '{% set ns = namespace(a=1) %}{{ ns }}',
    "{{ namespace({'a': 2}).a }}",
    '{% macro f(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}|{{ f(b=2, a=1) }}',
    '{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}',
    '{% macro f(a) %}{{ a }}{% endmacro %}{{ f(c=2) }}',
    '{% macro g() %}{% for i in [1,2] %}{{ i }}{% endfor %}{% endmacro %}{{ g() ~ g() }}',
    '{% if false %}{{ nofilter | bogus }}{% endif %}ok',
    "{% if true %}{{ 'x' | bogus }}{% endif %}",
    '{{ x is bogus_test }}',
    "{% if 'a' is bogus_test %}{% endif %}",
    "{%- for message in msgs %}{%- if loop.first and message.role != 'system' %}S{% endif %}{{ message.role[0] }}{%- endfor %}",
    "{{ msgs[-1].role == 'assistant' and not false }}",
    '{{ (msgs|last).content | trim }}',
    '{{ msgs | length is divisibleby 2 }}',
    '{% set content = msgs[0].content %}{% if content is string %}s{% endif %}{% if content is mapping %}m{% endif %}',
    '{{ 0 is odd }} {{ -3 is odd }} {{ 2.0 is even }}',
]


class GenerationTag(Extension):
    """HF's {% generation %}...{% endgeneration %} (AssistantTracker): renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers.utils.chat_template_utils: json.dumps without HTML escaping
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def specials(name):
    for prefix, bos, eos in SPECIALS:
        if name.startswith(prefix):
            return bos, eos
    return "<s>", "</s>"


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    templates, cases, skipped = {}, [], {}
    for fn in sorted(os.listdir(TDIR)):
        if not fn.endswith(".jinja"):
            continue
        name = fn[:-len(".jinja")]
        with open(os.path.join(TDIR, fn), encoding="utf-8", newline="") as f:
            src = f.read()
        try:
            tmpl = env.from_string(src)
        except jinja2.exceptions.TemplateError as e:
            skipped[name] = "jinja2 cannot parse it: %s" % e
            continue
        bos, eos = specials(name)
        templates[name] = {"bos": bos, "eos": eos}
        for ci, conv in enumerate(CONVS):
            for gen in (True, False):
                out, err, raised = None, None, False
                try:
                    out = tmpl.render(messages=conv, add_generation_prompt=gen, bos_token=bos, eos_token=eos,
                                      tools=None, documents=None)
                except jinja2.exceptions.TemplateError as e:
                    err, raised = str(e), type(e) is jinja2.exceptions.TemplateError
                except Exception as e:  # TypeError etc. from the template's own code
                    err = "%s: %s" % (type(e).__name__, e)
                cases.append({"template": name, "conv": ci, "add_generation_prompt": gen,
                              "expected": out, "error": err, "raised": raised})
    snippets = []
    env2 = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                         extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
    env2.filters["tojson"] = tojson
    env2.globals["raise_exception"] = raise_exception
    env2.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    for src in SNIPPETS:
        out, err = None, None
        try:
            out = env2.from_string(src).render(bos_token="<s>", eos_token="</s>", **VARS)
        except Exception as e:
            err = "%s: %s" % (type(e).__name__, e)
        snippets.append({"template": src, "expected": out, "error": err})
    with open(OUT_SNIPPETS, "w", encoding="utf-8") as f:
        # key order matters: the C test builds VARS in file order, as Python iterates them
        json.dump({"oracle": "jinja2 %s, same environment as renders.json" % jinja2.__version__,
                   "now_epoch": int(NOW.timestamp()), "vars": VARS, "snippets": snippets},
                  f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("%d snippets (%d errors)" % (len(snippets), sum(1 for x in snippets if x["error"])))
    doc = {"oracle": "jinja2 %s ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, "
                     "loopcontrols + generation) with HF's tojson/raise_exception/strftime_now" % jinja2.__version__,
           "now_epoch": int(NOW.timestamp()), "templates": templates, "skipped": skipped,
           "conversations": CONVS, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0, sort_keys=True)
        f.write("\n")
    print("%d templates, %d cases (%d errors), skipped %d" %
          (len(templates), len(cases), sum(1 for c in cases if c["error"]), len(skipped)))


if __name__ == "__main__":
    sys.exit(main())
