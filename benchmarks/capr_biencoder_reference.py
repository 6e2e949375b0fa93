"""Zero-shot CAPR reference: MiniLM as a bi-encoder (mean pooling + cosine), no training at all.

all-MiniLM-L6-v2 is a sentence-embedding model, so without any fine-tuning it can already rank passages:
embed the query and every candidate (mean of the last hidden states over real tokens, L2-normalised) and
rank the candidates by cosine similarity. This gives a meaningful zero-shot number to put beside the
cross-encoder `finetune` runs, whose classification head is untrained unless the run trains it.

The queries and candidate sets are read through the `capr` task itself
(``kinject.registry.registry("tasks").get("capr")`` -> ``examples(split, env)``) with the same config and seed
as the `kinject run` being compared, so they are identical to what the cross-encoder scores; the metrics
are the same evaluators (`recall-at-k`, `mrr`, pessimistic ties).

Usage (the CAPR baseline in docs/results.md used the defaults below):
  .venv/bin/python -m benchmarks.capr_biencoder_reference --data-dir /work/shared/data \
      --cache-dir .kinject-cache --seed 42 --set max_eval_queries=25 [--set dataset=hpo] [--max-length 256]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def embed(model, tokenizer, texts: list[str], max_length: int, batch_size: int):
    """Mean-pooled, L2-normalised last hidden states (the sentence-transformers recipe of this model)."""
    import torch

    out = []
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # length-sorted batches: less padding
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            enc = tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.extend(zip(idx, torch.nn.functional.normalize(pooled, dim=-1)))
    vectors = [None] * len(texts)
    for i, vec in out:
        vectors[i] = vec
    return torch.stack(vectors)


def score_split(task, split: str, env, model, tokenizer, max_length: int, batch_size: int) -> dict[str, float]:
    from kinject.tasks.sequence import evaluate_all

    examples = task.examples(split, env)  # one row per (query, candidate), group = query id
    queries = list(dict.fromkeys(ex["text"] for ex in examples))
    passages = list(dict.fromkeys(ex["text_pair"] for ex in examples))
    q_vec = embed(model, tokenizer, queries, max_length, batch_size)
    p_vec = embed(model, tokenizer, passages, max_length, batch_size)
    q_index = {q: i for i, q in enumerate(queries)}
    p_index = {p: i for i, p in enumerate(passages)}
    scores = [float(q_vec[q_index[ex["text"]]] @ p_vec[p_index[ex["text_pair"]]]) for ex in examples]
    refs = [ex["label"] == "relevant" for ex in examples]
    groups = [ex["group"] for ex in examples]
    metrics = evaluate_all(task.metric_refs(), refs, scores, groups=groups)
    metrics["queries"] = float(len(set(groups)))
    metrics["pairs"] = float(len(examples))
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--cache-dir", default=".kinject-cache")
    parser.add_argument("--seed", type=int, default=42, help="the run's seed (it picks the evaluation queries)")
    parser.add_argument("--limit", type=int, default=None, help="the run's --limit (caps queries), if any")
    parser.add_argument("--set", action="append", default=[], help="capr task field, e.g. max_eval_queries=25")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per text (the model's ST default)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--splits", default="dev,test")
    args = parser.parse_args()

    import torch
    import yaml
    from transformers import AutoModel

    from kinject.interfaces import Environment
    from kinject.api import resolve_model
    from kinject.api import load_tokenizer
    from kinject.registry import registry

    options = {}
    for item in args.set:
        key, _, value = item.partition("=")
        options[key] = yaml.safe_load(value)
    task = registry("tasks").get("capr")(**options)
    env = Environment(data_dir=args.data_dir, cache_dir=args.cache_dir, seed=args.seed, limit=args.limit,
                      offline=True)
    torch.manual_seed(0)
    path = resolve_model("minilm", args.cache_dir)
    tokenizer, model = load_tokenizer(path), AutoModel.from_pretrained(path).eval()
    result = {"task": task.describe_data(env), "options": options, "seed": args.seed,
              "max_length": args.max_length}
    for split in args.splits.split(","):
        start = time.perf_counter()
        result[split] = score_split(task, split, env, model, tokenizer, args.max_length, args.batch_size)
        result[split]["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
