"""Question-like pseudo-queries from the packaged instruct model (issue 37, item 3).

    python bench/instruct_queries.py --dataset ../shared/data/scifact --out W/instruct.jsonl \\
        [--first-small 82] [--limit 1000] [--seconds 1500] [--batch 16] [--passage-tokens 128]
        [--prompt oneshot|fewshot] [--device cpu|cuda|auto]

For a seeded random sample of the corpus's documents (documents only: no query, no
judgment is used) asks SmolLM2-135M-Instruct, through its chat template, for one short
search query about the passage (``--prompt oneshot``: one invented example, a question;
``fewshot``: three invented examples of three forms, a question, a keyword list and a
claim, so that the model copies no one form) (title + text truncated to ``--passage-tokens`` tokens of
its tokenizer): greedy, ``--new-tokens`` new tokens at most, batched with left padding.
The output is cleaned to one line (:func:`clean_query`). Rows are appended to ``--out``
(``{"_id", "query", "raw"}``) batch by batch, and documents already there are skipped, so
a run stopped by ``--seconds`` or by hand resumes. ``--first-small N`` puts first the N
documents that ``bench/fit_variants.py --small N`` samples, so its simulation has its own
documents' queries. Prints the cost: seconds per 1,000 passages and tokens/s (prompt and
generated) with the machine's load average.

The model is the converted HF directory (safetensors, tokenizer.json, chat template) made
from the packaged GGUF (``~/.cache/lr-opensearch/models/smollm2-135m``, ``--model``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

SYSTEM = "You turn a passage into the short web search query that would find it. You reply with the query only."
EXAMPLE = ("Coffee intake and liver health. In a cohort of 2,000 adults, drinking two or more cups of coffee a "
           "day was associated with lower rates of liver fibrosis after adjusting for alcohol use.",
           "does coffee protect against liver fibrosis")
# Invented passages (no collection's text); the forms differ so that none is the only one shown.
EXAMPLES = {
    "oneshot": (EXAMPLE,),
    "fewshot": (
        EXAMPLE,
        ("Thermal fatigue of turbine blades. Repeated heating and cooling cycles open cracks at the leading "
         "edge of nickel alloy blades; a ceramic coating halved the crack growth rate in bench tests.",
         "thermal cycling cracks nickel turbine blades coating"),
        ("Sleep and memory. Students who slept eight hours after learning a word list recalled more words the "
         "next day than students who were kept awake, and the gap grew over a week.",
         "Sleep after learning improves recall of word lists."),
    ),
}
PROMPT = "Passage: {passage}\n\nSearch query:"
_PREFIX = re.compile(r"^\s*(?:(?:search\s+)?query|question|answer|search)\s*[:\-]\s*", re.IGNORECASE)
_QUOTES = "\"'`“”‘’*"


def clean_query(raw: str) -> str:
    """The first non-empty line, without a ``Query:``-like prefix, enclosing quotes, a list
    marker or surrounding spaces ('' when nothing is left)."""
    for line in raw.splitlines():
        line = line.strip()
        line = _PREFIX.sub("", line)
        line = re.sub(r"^(?:\d+[.)]|[-•])\s+", "", line)
        line = line.strip().strip(_QUOTES).strip()
        line = _PREFIX.sub("", line).strip().strip(_QUOTES).strip()
        if line:
            return line
    return ""


def sample_order(n_docs: int, first_small: int, seed: int) -> list[int]:
    """Document indices: first the ``--small`` sample of ``bench/fit_variants.py`` (its own
    ``default_rng(1)`` draw), then a seeded permutation of the rest."""
    first: list[int] = []
    if first_small:
        first = [int(i) for i in np.sort(np.random.default_rng(1).choice(n_docs, first_small, replace=False))]
    taken = set(first)
    rest = [int(i) for i in np.random.default_rng(seed).permutation(n_docs) if int(i) not in taken]
    return first + rest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", type=Path, default=Path.home() / ".cache/lr-opensearch/models/smollm2-135m")
    p.add_argument("--first-small", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=1000,
                   help="documents in all (with those already in --out); 0: every document")
    p.add_argument("--seconds", type=float, default=0, help="stop after this many seconds (0: no limit)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--passage-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--show", type=int, default=8, help="print this many examples")
    p.add_argument("--prompt", choices=sorted(EXAMPLES), default="oneshot")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (cuda when there is one)")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lr_opensearch.evaluation.beir import iter_jsonl, load_beir

    data = load_beir(args.dataset, "test")  # for its corpus only: no query or judgment is read
    recs = [(str(r["_id"]), r.get("title") or "", r.get("text") or "") for _, r in iter_jsonl(data.corpus_path)]
    done: set[str] = set()
    if args.out.is_file():
        done = {json.loads(line)["_id"] for line in args.out.read_text().splitlines() if line.strip()}
    todo = [recs[i] for i in sample_order(len(recs), args.first_small, args.seed)][:args.limit or None]
    todo = [r for r in todo if r[0] not in done]
    t_load = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.model)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, use_safetensors=True)
    model.to(device).eval()
    load_s = time.perf_counter() - t_load
    print(f"model loaded in {load_s:.1f} s; {len(done)} documents already done, {len(todo)} to do; "
          f"device {device}, torch threads {torch.get_num_threads()}, prompt {args.prompt}", flush=True)

    def prompt(title: str, text: str) -> str:
        ids = tok(f"{title}. {text}" if title else text, add_special_tokens=False)["input_ids"]
        passage = tok.decode(ids[:args.passage_tokens])
        msgs = [{"role": "system", "content": SYSTEM}]
        for shown_passage, shown_query in EXAMPLES[args.prompt]:
            msgs += [{"role": "user", "content": PROMPT.format(passage=shown_passage)},
                     {"role": "assistant", "content": shown_query}]
        msgs.append({"role": "user", "content": PROMPT.format(passage=passage)})
        return str(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))

    echoes = {q.lower().rstrip("?.") for _, q in EXAMPLES[args.prompt]}
    start = time.perf_counter()
    n = prompt_tokens = new_tokens = 0
    shown: list[dict[str, Any]] = []
    with args.out.open("a") as out:
        for b in range(0, len(todo), args.batch):
            if args.seconds and time.perf_counter() - start > args.seconds:
                print(f"stopped by --seconds after {n} documents", flush=True)
                break
            chunk = todo[b:b + args.batch]
            enc = tok([prompt(t, x) for _, t, x in chunk], return_tensors="pt", padding=True,
                      add_special_tokens=False).to(device)
            with torch.inference_mode():
                gen = model.generate(**enc, max_new_tokens=args.new_tokens, do_sample=False,
                                     pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            outs = gen[:, enc["input_ids"].shape[1]:]
            prompt_tokens += int(enc["attention_mask"].sum())
            for (doc_id, title, _), row in zip(chunk, outs, strict=True):
                keep = row[row != tok.pad_token_id]
                new_tokens += int(len(keep)) + 1  # + the end token
                raw = tok.decode(keep, skip_special_tokens=True)
                query = clean_query(raw)
                if query.lower().rstrip("?.") in echoes:  # an example echoed: no query
                    query = ""
                item = {"_id": doc_id, "query": query, "raw": raw}
                out.write(json.dumps(item) + "\n")
                if len(shown) < args.show:
                    shown.append({"title": title, **item})
            out.flush()
            n += len(chunk)
            el = time.perf_counter() - start
            print(f"{n} documents in {el:.0f} s ({1000 * el / n:.0f} s per 1,000; load {os.getloadavg()[0]:.1f})",
                  flush=True)
    el = time.perf_counter() - start
    for s in shown:
        print(json.dumps(s))
    if n:
        print(json.dumps({"documents": n, "seconds": round(el, 1), "seconds_per_1000": round(1000 * el / n, 1),
                          "prompt_tokens_per_s": round(prompt_tokens / el, 1),
                          "new_tokens_per_s": round(new_tokens / el, 1),
                          "mean_new_tokens": round(new_tokens / n, 1), "batch": args.batch,
                          "device": device, "prompt": args.prompt,
                          "model_load_s": round(load_s, 1), "loadavg_end": [round(x, 2) for x in os.getloadavg()]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
