#!/usr/bin/env python3
"""Prompt-lookup speculation (sched.h "Speculation"): single-sequence decode
with `--spec off` against `--spec auto`, on an extraction workload (outputs
that copy spans of the prompt) and a free-writing one, in the same run.

Workloads (chat requests to the default model, greedy unless --sampled,
max_tokens --max-tokens, fixed texts):
  extract  copy a record into JSON, repeat a paragraph word for word, quote
           the sentences that mention a word, rename a variable in a function
  write    stories, explanations, a poem, a letter: nothing to copy
Each runs as one `jobworker --batch-file` with --max-seqs 1 (every request
alone: the single-sequence case) unless --max-seqs says otherwise; rounds
alternate off, auto, off, auto... (--rounds). Reported per workload and mode:
output tokens / wall second and output tokens / CPU second (the box is
shared: CPU time is the steadier number; the median over rounds of both),
forward steps, and with speculation the drafts fed, accepted and the
acceptance rate. The outputs of both modes must be identical (the script
fails otherwise); the load average is printed before and after.

usage: python3 tests/bench/bench_spec.py [--model PATH] [--threads 2] [--rounds 3]
           [--max-tokens 128] [--max-seqs 1] [--spec-max-seqs N] [--sampled]
           [--workloads extract,write]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

RECORDS = [
    ("Maria Gonzalez", "maria.gonzalez@example.org", "+1 415 555 0134",
     "1204 Alder Street, Apartment 5B, Portland, OR 97205", "prefers email contact after 5pm"),
    ("Kenji Watanabe", "k.watanabe@fastmail.jp", "+81 3 5555 2871",
     "4-12-8 Shibuya, Shibuya-ku, Tokyo 150-0002", "account flagged for a billing review in March"),
    ("Amara Okafor", "amara.okafor@lagosmail.ng", "+234 1 555 9921",
     "17 Admiralty Way, Lekki Phase 1, Lagos", "asked for the invoice to be split in two"),
    ("Lukas Brandt", "lukas.brandt@posteo.de", "+49 30 5555 7712",
     "Kastanienallee 42, 10435 Berlin", "ordered the blue model twice by mistake"),
]

PARAGRAPHS = [
    "The river rose slowly through the night, and by morning the lower fields were under water. "
    "The farmers moved their animals to the hill behind the church, where the ground stayed dry. "
    "Nobody in the village could remember a flood this early in the spring.",
    "Our new billing system sends every invoice as a PDF attached to an email. Customers who want "
    "paper copies can ask for them on the account page. Invoices are due thirty days after the "
    "date printed at the top.",
    "The museum opens at nine in the morning and closes at six in the evening. On Thursdays it "
    "stays open until nine at night. Children under twelve enter for free, and students pay half "
    "price with a valid card.",
    "To reset the router, hold the small button on the back for ten seconds until the light "
    "blinks orange. Wait two minutes for it to restart. Then connect to the network named on the "
    "sticker under the device.",
]

CODE = '''def total_price(items, tax_rate):
    x = 0
    for item in items:
        x = x + item.price * item.quantity
    x = x * (1 + tax_rate)
    return round(x, 2)'''

WRITE = [
    "Write a short story about a dragon who wants to learn how to bake bread.",
    "Explain in a few paragraphs why the sky is blue during the day and red at sunset.",
    "Write a poem about the first snow of winter in a small mountain town.",
    "Write a letter to a friend describing your favourite place to spend a summer afternoon.",
    "Describe how a bicycle works to someone who has never seen one.",
    "Write a short story about a robot that finds a lost cat in a big city.",
    "Give advice to a student who is nervous about starting at a new school.",
    "Describe a busy market on a Saturday morning, with its sounds and smells.",
]


def extract_prompts():
    out = []
    for name, email, phone, addr, notes in RECORDS:
        out.append(f"Here is a customer record:\nName: {name}\nEmail: {email}\nPhone: {phone}\n"
                   f"Address: {addr}\nNotes: {notes}\n\nRewrite this record as a JSON object with the "
                   "keys name, email, phone, address and notes. Copy every value exactly.")
    for p in PARAGRAPHS[:2]:
        out.append(f"Repeat the following paragraph exactly, word for word:\n\n{p}")
    out.append(f"Text: {PARAGRAPHS[2]}\n\nQuote every sentence of the text that mentions a time of day, "
               "exactly as written.")
    out.append(f"Here is a Python function:\n\n{CODE}\n\nRewrite the function with the variable x "
               "renamed to subtotal. Change nothing else.")
    return out


def lines_of(prompts, max_tokens, sampled):
    out = []
    for i, p in enumerate(prompts):
        body = {"model": "m", "messages": [{"role": "user", "content": p}], "max_tokens": max_tokens,
                "temperature": 0}
        if sampled:
            body.update({"temperature": 0.7, "top_p": 0.95, "seed": 100 + i})
        out.append(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": body}))
    return "\n".join(out) + "\n"


def run(model, path, args, spec):
    cmd = [os.path.join(ROOT, "build", "jobworker"), "--model", model, "--batch-file", path,
           "--threads", str(args.threads), "--max-seqs", str(args.max_seqs), "--spec", spec]
    if args.spec_max_seqs:
        cmd += ["--spec-max-seqs", str(args.spec_max_seqs)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        sys.exit("jobworker failed: " + r.stderr[-2000:])
    m = re.search(r"sched-stats: (\{.*\})", r.stderr)
    st = json.loads(m.group(1))
    texts = {}
    for line in r.stdout.splitlines():
        o = json.loads(line)
        texts[o["custom_id"]] = o["response"]["body"]["choices"][0]["message"]["content"]
    return st, texts


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--max-seqs", type=int, default=1)
    ap.add_argument("--spec-max-seqs", type=int, default=0, help="jobworker's default when 0")
    ap.add_argument("--sampled", action="store_true")
    ap.add_argument("--workloads", default="extract,write")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"no model at {args.model}: run scripts/fetch-model")
    print(f"model {os.path.basename(args.model)}, threads {args.threads}, max-seqs {args.max_seqs}, "
          f"spec-max-seqs {args.spec_max_seqs or 'default'}, "
          f"max_tokens {args.max_tokens}, {'sampled (T 0.7, top_p 0.95, seeded)' if args.sampled else 'greedy'}, "
          f"rounds {args.rounds}; load average before: {loadavg()}", flush=True)
    sets = {"extract": extract_prompts(), "write": WRITE}
    for wl in args.workloads.split(","):
        prompts = sets[wl]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(lines_of(prompts, args.max_tokens, args.sampled))
            path = f.name
        res = {"off": [], "auto": []}
        texts = {}
        try:
            for _ in range(args.rounds):
                for spec in ("off", "auto"):
                    st, tx = run(args.model, path, args, spec)
                    res[spec].append(st)
                    if spec in texts and texts[spec] != tx:
                        sys.exit(f"{wl}: --spec {spec} output changed between rounds")
                    texts[spec] = tx
        finally:
            os.unlink(path)
        if texts["off"] != texts["auto"]:
            bad = [k for k in texts["off"] if texts["off"][k] != texts["auto"].get(k)]
            sys.exit(f"{wl}: outputs differ with speculation: {bad}")
        base = None
        for spec in ("off", "auto"):
            runs = res[spec]
            tok = runs[0]["completion_tokens"]
            wall = statistics.median(tok / r["wall_s"] for r in runs)
            cpu = statistics.median(tok / r["cpu_s"] for r in runs)
            line = (f"{wl:8s} --spec {spec:4s}: {len(prompts)} requests, {tok} output tokens, "
                    f"{runs[0]['steps']} steps, {wall:6.1f} tok/s wall, {cpu:6.1f} tok/CPU-s")
            if spec == "auto":
                d, a = runs[0]["spec_drafted"], runs[0]["spec_accepted"]
                line += (f"; drafts {d} in {runs[0]['spec_steps']} steps, accepted {a} "
                         f"({100.0 * a / d if d else 0:.0f}%), {tok / runs[0]['steps']:.2f} tok/step; "
                         f"x{wall / base[0]:.2f} wall, x{cpu / base[1]:.2f} CPU")
            else:
                base = (wall, cpu)
            print(line, flush=True)
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
