#!/usr/bin/env python3
"""tests/oracle/chat_template_fixtures.py - make the chat-template fixtures ONCE.

Renders every template in tests/fixtures/chat/templates/*.jinja over a set of
conversations with Python's jinja2 exactly as Hugging Face transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks=True,
lstrip_blocks=True, the loopcontrols extension, HF's {% generation %} tag,
HF's tojson, raise_exception, strftime_now) and writes
tests/fixtures/chat/renders.json. The C unit test
(tests/unit/worker/engine/test_jinja.c) renders the same templates with
worker/engine/jinja.c and compares byte for byte. jinja2 is NOT needed at
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
