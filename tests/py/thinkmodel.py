"""tests/py/thinkmodel.py - a tiny "reasoning model" whose output is known:
the random qwen3 fixture (tests/fixtures/model/qwen3_tied.f32.gguf, 2
layers, hidden 64, a 300-token byte-level vocabulary) with Qwen3-0.6B's own
chat template (tests/fixtures/chat/templates), its context raised to 2048,
and an output head that makes it say a fixed cycle of tokens.

Why it works. The fixture ties its output head to its embeddings, and its
random layers leave the last position's hidden state close to that token's
embedding (near orthogonal to the others), so greedy decoding copies the
last token: after Qwen3's generation prompt "...assistant\\n" it writes
"\\n" for ever (logit gap about 28 nats), which trims to nothing, so no
thinking or text block could be shown. An untied head (output.weight) whose
row j is the embedding of the token *before* j in a cycle turns "copy the
last token" into "write the next token of the cycle": after "\\n" it writes
" the cat is on house. then rain came\\n the cat ..." and so on, whatever
the prompt before that newline. Qwen3's template renders the thinking
switch (enable_thinking) and tools (Hermes <tool_call>) as the real model's
does; the text never closes the thinking block by itself, so a thinking
budget (thinking_token_budget, Anthropic's budget_tokens) is what ends it:
the worker forces "\\n</think>\\n\\n" and the cycle goes on as the answer.
With thinking off the cycle is the answer.

Standard library only (ggufkv reads and writes the GGUF).
"""
import os

import ggufkv
from harness import ROOT

FIXTURE = os.path.join(ROOT, "tests/fixtures/model/qwen3_tied.f32.gguf")
TEMPLATE = os.path.join(ROOT, "tests/fixtures/chat/templates/Qwen-Qwen3-0.6B.jinja")
# the cycle, as vocabulary entries (byte-level BPE: "Ġ" is a space, "Ċ" a newline)
CYCLE = ["Ċ", "Ġthe", "Ġcat", "Ġis", "Ġon", "Ġhouse.", "Ġthen", "Ġrain", "Ġcame"]
TEXT = "".join(t.replace("Ġ", " ").replace("Ċ", "\n") for t in CYCLE[1:] + CYCLE[:1])


def build(path, n_ctx=2048):
    """Write the scripted model to path; returns path."""
    kv = ggufkv.read(FIXTURE)[0]
    vocab = kv["tokenizer.ggml.tokens"][1][1]
    ids = [vocab.index(t) for t in CYCLE]
    (n_embd, n_vocab), typ, off = ggufkv.tensor_index(FIXTURE)["token_embd.weight"]
    assert typ == 0 and n_vocab == len(vocab), (typ, n_vocab)
    data = ggufkv.read(FIXTURE)[3]
    row = 4 * n_embd
    emb = [data[off + i * row:off + (i + 1) * row] for i in range(n_vocab)]
    head = list(emb)
    for k, i in enumerate(ids):  # the token after ids[k-1] is ids[k]
        head[i] = emb[ids[k - 1]]
    with open(TEMPLATE) as f:
        tmpl = f.read()
    ggufkv.rewrite(FIXTURE, path, {"tokenizer.chat_template": tmpl}, {"qwen3.context_length": n_ctx},
                   {"output.weight": ([n_embd, n_vocab], b"".join(head))})
    return path


def answer_of(n):
    """The first n tokens the model writes after a newline, as text."""
    toks = (CYCLE[1:] + CYCLE[:1]) * (n // len(CYCLE) + 1)
    return "".join(t.replace("Ġ", " ").replace("Ċ", "\n") for t in toks[:n])



def start_worker(d, model_id="tiny-think", worker_token=None):
    """A jobworker serving the scripted model (built under tmpdir()) to jobd d."""
    from harness import Proc, binary, tmpdir
    from test_jobworker import WT
    path = build(os.path.join(tmpdir(), "qwen3-think.gguf"))
    return Proc([binary("jobworker", asan=False), "--jobd", f"http://127.0.0.1:{d.port}", "--model", path,
                 "--model-id", model_id, "--worker-token", worker_token or WT, "--name", "think-w",
                 "--threads", "1"])
