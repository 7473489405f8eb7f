#!/usr/bin/env python3
"""sample_fixtures.py - numpy reference for worker/engine/sample.c's filters and logprobs.

Writes tests/fixtures/sample/filters.json (run from the repo root):

    python3 tests/oracle/sample_fixtures.py

Only numpy is needed. The reference is written from the definitions below,
independently of the C code (full sorts with np.lexsort, cumsum, boolean
masks), so the C test compares two implementations of one specification.

Definitions (the order is vLLM's: penalties, temperature, then filters):
  0. sanitise: NaN -> -inf (excluded), +inf -> float32 max.
  1. logit_bias: l[id] += bias.
  2. repetition penalty r (over the distinct ids of prompt + generated):
     l = l / r if l > 0 else l * r.
     frequency / presence (over generated ids, c = count):
     l -= c * frequency + (c > 0) * presence.
  3. temperature < 1e-5: greedy, the argmax (lowest id on ties) with p = 1.
  4. l /= T; p = exp(l - max(l)); tokens with p == 0 (underflow, -inf) drop.
  5. top_k > 0: keep the first k in the order (p desc, id asc).
  6. top_p < 1: renormalise, sort by (p desc, id asc), keep the smallest
     prefix whose cumulative mass is >= top_p (at least one token).
  7. min_p > 0: keep p >= min_p * max(p).
  8. the survivors, ascending id, with probabilities renormalised.
Logprobs: log_softmax of the sanitised raw row (float64), computed as
(l - max) - log(sum(exp(l - max))); the top n sorted by (l - max desc, id
asc), only finite ones; values below -9999 reported as -9999 (OpenAI).

Non-finite logits are written as the strings "nan", "inf", "-inf".
"""
import json
import os

import numpy as np

F32_MAX = float(np.finfo(np.float32).max)


def sanitise(x):
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    x = np.where(np.isnan(x), -np.inf, x)
    return np.where(np.isposinf(x), F32_MAX, x)


def reference(logits, prm, gen, prompt):
    n = len(logits)
    l = sanitise(logits)
    for tid, b in prm.get("logit_bias", []):
        l[tid] += np.float64(np.float32(b))
    r = prm.get("repetition_penalty", 1.0)
    if r != 1.0:
        seen = sorted(set(prompt) | set(gen))
        for tid in seen:
            l[tid] = l[tid] / r if l[tid] > 0 else l[tid] * r
    f, pr = prm.get("frequency_penalty", 0.0), prm.get("presence_penalty", 0.0)
    if f != 0 or pr != 0:
        c = np.bincount(np.asarray(gen, dtype=np.int64), minlength=n).astype(np.float64)
        l = l - (c * f + (c > 0) * pr)
    t = prm.get("temperature", 1.0)
    ids = np.arange(n)
    if t < 1e-5:
        best = int(np.argmax(l))  # first (lowest id) maximum
        return [best], [1.0]
    l = l / t
    finite = l > -np.inf
    p = np.zeros(n)
    p[finite] = np.exp(l[finite] - l[finite].max())
    alive = p > 0
    k = prm.get("top_k", 0)
    if k > 0 and k < alive.sum():
        order = np.lexsort((ids, -p))  # primary -p, secondary id
        order = order[alive[order]]
        keep = np.zeros(n, bool)
        keep[order[:k]] = True
        alive &= keep
    tp = prm.get("top_p", 1.0)
    if tp < 1.0:
        order = np.lexsort((ids, -p))
        order = order[alive[order]]
        cum = np.cumsum(p[order])
        want = tp * p[order].sum()
        j = int(np.argmax(cum >= want)) if (cum >= want).any() else len(order) - 1
        keep = np.zeros(n, bool)
        keep[order[: j + 1]] = True
        alive &= keep
    mp = prm.get("min_p", 0.0)
    if mp > 0:
        alive &= p >= mp * p[alive].max()
    sel = ids[alive]
    q = p[sel] / p[sel].sum()
    return [int(i) for i in sel], [float(v) for v in q]


def logprobs_ref(logits, token, n_top):
    l = sanitise(logits)
    m = l.max()
    d = l - m  # logprob = (l - m) - log(sum exp(l - m)): no loss when m is huge
    lp = d - np.log(np.exp(d[d > -np.inf]).sum())
    ids = np.arange(len(l))
    order = np.lexsort((ids, -d))
    order = [int(i) for i in order if lp[i] > -np.inf][:n_top]
    return (float(max(lp[token], -9999.0)), order,
            [float(max(lp[i], -9999.0)) for i in order])


def enc(x):
    x = float(np.float32(x))
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def main():
    rng = np.random.default_rng(20240607)
    cases = []
    param_sets = [
        {},
        {"temperature": 0.7},
        {"temperature": 1.3, "top_k": 5},
        {"top_p": 0.9},
        {"temperature": 0.5, "top_p": 0.5},
        {"min_p": 0.05},
        {"temperature": 1.5, "min_p": 0.1},
        {"top_k": 10, "top_p": 0.8, "min_p": 0.02},
        {"temperature": 0.0},
        {"temperature": 0.0, "frequency_penalty": 1.5, "presence_penalty": 0.5},
        {"frequency_penalty": 0.8, "presence_penalty": -0.4, "top_p": 0.95},
        {"repetition_penalty": 1.3, "top_k": 20},
        {"repetition_penalty": 0.8, "temperature": 0.9},
        {"top_k": 1},
        {"top_p": 0.01},
        {"temperature": 2.0, "top_k": 40, "top_p": 0.97, "min_p": 0.01,
         "frequency_penalty": 2.0, "presence_penalty": 2.0, "repetition_penalty": 1.1},
    ]
    for ci in range(48):
        n = [8, 50, 200, 1000][ci % 4]
        scale = [1.0, 3.0, 6.0][ci % 3]
        logits = rng.normal(0, scale, n).astype(np.float32)
        prm = dict(param_sets[ci % len(param_sets)])
        if ci % 5 == 0:
            nb = min(n, 4)
            prm["logit_bias"] = [[int(i), float(np.float32(rng.uniform(-100, 100) if j % 2 else rng.uniform(-5, 5)))]
                                 for j, i in enumerate(rng.choice(n, nb, replace=False))]
        gen = [int(x) for x in rng.integers(0, n, int(rng.integers(0, 30)))]
        prompt = [int(x) for x in rng.integers(0, n, int(rng.integers(0, 20)))]
        if ci % 7 == 3:  # non-finite entries
            logits[rng.integers(0, n)] = np.nan
            logits[rng.integers(0, n)] = -np.inf
        if ci % 11 == 5:
            logits[rng.integers(0, n)] = np.inf
        ids, probs = reference(logits, prm, gen, prompt)
        tok = ids[int(rng.integers(0, len(ids)))]
        n_top = int(rng.integers(0, 21))
        lp, top_ids, top_lps = logprobs_ref(logits, tok, n_top)
        cases.append({
            "logits": [enc(x) for x in logits],
            "params": prm, "gen": gen, "prompt": prompt,
            "ids": ids, "probs": probs,
            "token": tok, "n_top": n_top, "logprob": lp,
            "top_ids": top_ids, "top_logprobs": top_lps,
        })
    out = {
        "source": "tests/oracle/sample_fixtures.py (numpy %s)" % np.__version__,
        "cases": cases,
    }
    os.makedirs("tests/fixtures/sample", exist_ok=True)
    with open("tests/fixtures/sample/filters.json", "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote %d cases" % len(cases))


if __name__ == "__main__":
    main()
