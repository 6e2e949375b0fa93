"""Do MoP's partition adapters leave the encoder's output input-specific? (docs/results.md, "MoP on CAPR")

Loads minilm (or --model) with a task head, once plain and once with the given partition adapters fused as MoP
fuses them, and prints the mean pairwise cosine similarity of the last layer's [CLS] states and mean-pooled
states over fixed question/passage pairs, then the same for each adapter alone: near 1.0 means the output hardly
depends on the input (the fine-tune must undo that before a [CLS]-pooled task can learn).

Usage:
  python -m benchmarks.experiments.mop_representation --adapters CACHE/stages/mop-adapter-0/KEY/adapter ...
(a MoP run's kinject.log names each `mop-adapter-N [KEY]` stage; KINJECT_CACHE_DIR holds them.)
"""

from __future__ import annotations

import argparse

PAIRS = [("What are the symptoms of diabetes?", "Symptoms include thirst and frequent urination."),
         ("How is asthma treated?", "Treatment includes inhalers that open the airways."),
         ("What causes glaucoma?", "Glaucoma damages the optic nerve, often through high eye pressure."),
         ("Is psoriasis contagious?", "Psoriasis is not contagious."),
         ("What is the outlook for lymphoma?", "Survival depends on the type and stage of the lymphoma."),
         ("How many people have cystic fibrosis?", "About 30,000 people in the United States have it.")]


def similarity(model, batch) -> tuple[float, float]:
    """Mean pairwise cosine of the last layer's [CLS] and mean-pooled states over the batch's examples."""
    import torch

    with torch.no_grad():
        states = model.base_model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    off = ~torch.eye(len(states), dtype=torch.bool)
    out = []
    for vectors in (states[:, 0], (states * mask).sum(1) / mask.sum(1)):
        unit = torch.nn.functional.normalize(vectors, dim=-1)
        out.append(float((unit @ unit.T)[off].mean()))
    return out[0], out[1]


def main() -> None:
    import adapters

    from kinject.interfaces import Head
    from kinject.api import resolve_model
    from kinject.plugins.mop.fusion import attach_partition_adapters
    from kinject.training import build_task_model
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", nargs="+", required=True, help="partition adapter folders (saved adapters)")
    parser.add_argument("--model", default="minilm", help="the base model the adapters were trained on")
    parser.add_argument("--cache-dir", default=None, help="kinject cache (where 'tiny' is built)")
    args = parser.parse_args()
    path = resolve_model(args.model, args.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(path)
    batch = dict(tokenizer([q for q, _ in PAIRS], text_pair=[p for _, p in PAIRS], return_tensors="pt", padding=True))
    head = Head(kind="sequence", num_labels=2, problem_type="single_label_classification", labels=["no", "yes"])

    plain = build_task_model(path, head).eval()
    print("plain encoder:       [CLS] cos %.3f, mean-pooled cos %.3f" % similarity(plain, batch))
    fused = build_task_model(path, head)
    attach_partition_adapters(fused, list(args.adapters), {"mixture": "softmax"}, joint=True)
    print("adapters fused:      [CLS] cos %.3f, mean-pooled cos %.3f" % similarity(fused.eval(), batch))
    single = build_task_model(path, head)
    adapters.init(single)
    for i, folder in enumerate(args.adapters):
        single.load_adapter(str(folder), load_as=f"part-{i}", use_safetensors=True)
    for i in range(len(args.adapters)):
        single.set_active_adapters(f"part-{i}")
        print(f"adapter {i} alone:     [CLS] cos %.3f, mean-pooled cos %.3f" % similarity(single.eval(), batch))


if __name__ == "__main__":
    main()
