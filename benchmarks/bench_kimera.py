"""KIMERA cost ratios, measured in one process on the same batches and model (figures in docs/kimera.md).

1. masked retraining step / plain training step (AdamW; the mask's per-head update scaling attached).
   Target <= 1.05.
2. one importance round (per-example gates, |dL/dxi| accumulated) / one forward+backward pass over the
   same scoring set. Target <= 1.1.

Usage: .venv/bin/python -m benchmarks.bench_kimera [--model minilm] [--batch 16] [--length 64] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    from kinject.api import resolve_model
    from kinject.plugins.kimera.importance import per_example_loss, score_heads
    from kinject.plugins.kimera.masks import HeadUpdateScaler

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--score-batches", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    path = resolve_model(args.model, os.environ.get("KINJECT_CACHE_DIR", "/tmp/kinject-bench-cache"))

    # 1. masked vs plain step
    encoder = AutoModel.from_pretrained(path).train()
    cfg = encoder.config
    ids = torch.randint(1000, cfg.vocab_size, (args.batch, args.length))
    mask = (torch.rand(cfg.num_hidden_layers, cfg.num_attention_heads) > 0.3).float()
    opt_plain = torch.optim.AdamW(encoder.parameters(), lr=1e-5)
    opt_masked = torch.optim.AdamW(encoder.parameters(), lr=1e-5)
    scaler = HeadUpdateScaler(encoder, mask).attach(opt_masked)

    def step(opt):
        opt.zero_grad()
        encoder(input_ids=ids).last_hidden_state.pow(2).mean().backward()
        opt.step()

    for opt in (opt_plain, opt_masked):
        step(opt)  # warm-up, optimiser state
    plain, masked = [], []
    for _ in range(args.repeats):  # interleaved, so load changes hit both
        plain.append(median_time(lambda: step(opt_plain), 1))
        masked.append(median_time(lambda: step(opt_masked), 1))
    p, m = statistics.median(plain), statistics.median(masked)
    print(f"step: plain {p * 1000:.1f} ms, masked {m * 1000:.1f} ms, ratio {m / p:.3f} "
          f"(model {args.model}, batch {args.batch}, length {args.length})")

    def hooks():  # what the mask adds to a step: the pre/post optimiser-step hooks
        scaler.before_step()
        scaler.after_step()

    h = median_time(hooks, max(args.repeats * 5, 20))
    print(f"mask hooks alone: {h * 1000:.1f} ms per step = {h / p:.3f} of a plain step "
          f"(a quieter estimate of the overhead than the step ratio)")

    # 2. importance round vs forward+backward over the scoring set
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    batches = [{"input_ids": torch.randint(1000, cfg.vocab_size, (args.batch, args.length)),
                "attention_mask": torch.ones(args.batch, args.length, dtype=torch.long),
                "labels": torch.randint(0, 2, (args.batch,))} for _ in range(args.score_batches)]

    def fwd_bwd():
        for b in batches:
            model.zero_grad(set_to_none=True)
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            per_example_loss(logits, b["labels"], "single_label_classification").sum().backward()

    def importance():
        score_heads(model, batches, "single_label_classification")

    fwd_bwd(), importance()
    base, imp = [], []
    for _ in range(max(args.repeats // 4, 3)):
        base.append(median_time(fwd_bwd, 1))
        imp.append(median_time(importance, 1))
    b, i = statistics.median(base), statistics.median(imp)
    print(f"importance round: fwd+bwd {b:.2f} s, importance {i:.2f} s, ratio {i / b:.3f} "
          f"({args.score_batches} batches of {args.batch} x {args.length})")


if __name__ == "__main__":
    main()
