"""Bi-encoder heads (``task.encoder=bi|bi-frozen``) for sentence-pair similarity, pair classification and retrieval:
the score is the cosine of the two texts' mean-pooled embeddings; the checkpoint stays a plain sequence classifier
that ``AutoModel`` loads; the frozen variant is the zero-shot cosine on the same footing; cross stays the default."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from helpers import run_kinject as kinject

PAIRS = [("gene expression increased", "expression of the gene rose", 3.8),
         ("the drug dose reduced symptoms", "symptoms fell with the dose", 3.4),
         ("protein level rose after treatment", "the weather was cold today", 0.2),
         ("patients with the disease had risk", "a cat sat on the mat", 0.0),
         ("tumor cells grew", "cells of the tumor grew fast", 3.0),
         ("we went to the market", "trains run late on sunday", 0.6)]


def write_pairs(folder: Path, n: tuple[int, int, int] = (24, 8, 8), seed: int = 0) -> Path:
    """A small similarity set in BIOSSES's format (score 0-4)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in zip(("train", "dev", "test"), n):
        rows = ["pair_id\tsent1\tsent2\tscore"]
        for i in range(count):
            a, b, score = PAIRS[(i + rng.randrange(6)) % 6]
            rows.append(f"{split}-{i}\t{a}\t{b}\t{min(4.0, max(0.0, score + rng.uniform(-0.2, 0.2))):.2f}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return folder


def write_queries(folder: Path) -> Path:
    """A small CAPR JSONL set: each query's relevant passage shares its words."""
    folder.mkdir(parents=True, exist_ok=True)
    topics = ["gene expression", "drug dose", "protein level", "tumor cells", "disease risk", "clinical study"]
    for split, count in (("train", 12), ("dev", 6), ("test", 6)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for q in range(count):
                topic = topics[q % len(topics)]
                candidates = [{"pid": f"{split}{q}-rel", "text": f"the {topic} was measured", "relevant": True}]
                candidates += [{"pid": f"{split}{q}-{t}", "text": f"the {other} was measured", "relevant": False}
                               for t, other in enumerate(x for x in topics if x != topic)]
                handle.write(json.dumps({"qid": f"{split}{q}", "query": f"what about {topic}", "candidates":
                                         candidates}) + "\n")
    return folder


def kernel_applies_head_models() -> bool:
    from kinject.tasks import biencoder

    return biencoder.supported()


needs_kernel = pytest.mark.skipif(not kernel_applies_head_models(), reason="the kernel does not apply Head.model "
                                  "(the task's model transform); bi-encoders cannot run end to end")


def cosines(model_dir: str, first: list[str], second: list[str]) -> np.ndarray:
    """The reference: each text encoded alone by AutoModel, mean-pooled, cosine."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, encoder = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).eval()

    def embed(texts):
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    return (embed(first) * embed(second)).sum(-1).numpy()


def bi_model(tiny_model: str, objective: str, frozen: bool = False):
    from kinject.api import Head
    from kinject.training import build_task_model
    from kinject.tasks import biencoder

    outputs = 1 if objective == "regression" else 2
    head = Head(kind="sequence", num_labels=outputs, problem_type="regression" if outputs == 1 else
                "single_label_classification", labels=() if outputs == 1 else ("no", "yes"))
    return biencoder.install(build_task_model(tiny_model, head, seed=0), objective, frozen)


def scores(model, tokenizer, first: list[str], second: list[str]) -> np.ndarray:
    from transformers import DataCollatorWithPadding

    from kinject.tasks import biencoder
    from kinject.training.prediction import predict_here

    return predict_here(model, biencoder.pack(tokenizer, first, second, 64), DataCollatorWithPadding(tokenizer), 4)


# -- the model ------------------------------------------------------------------------------------------------ #
def test_untrained_bi_encoder_scores_the_cosine_of_each_text_encoded_alone(tiny_model, tmp_path):
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    from kinject.tasks import biencoder

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    first, second = [a for a, _, _ in PAIRS], [b for _, b, _ in PAIRS]
    model = bi_model(tiny_model, "regression")
    assert type(model).__name__ == "BertForSequenceClassification" and type(model).kinject_bi_encoder
    got = scores(model, tokenizer, first, second).reshape(-1)
    np.testing.assert_allclose(got, cosines(tiny_model, first, second), atol=1e-5)  # bias 0: the plain cosine

    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["kinject_bi_encoder"] == {"objective": "regression", "scale": 1.0}
    assert type(AutoModel.from_pretrained(tmp_path / "m")).__name__ == "BertModel"  # a sentence encoder
    np.testing.assert_allclose(cosines(str(tmp_path / "m"), first, second), got, atol=1e-5)
    loaded = biencoder.install(AutoModelForSequenceClassification.from_pretrained(tmp_path / "m"), "regression")
    np.testing.assert_allclose(scores(loaded, tokenizer, first, second).reshape(-1), got, atol=1e-6)

    single = tokenizer(first, padding=True, return_tensors="pt")  # single texts: the base forward (the probe)
    assert model(**single, output_hidden_states=True).hidden_states[-1].shape[-1] == model.config.hidden_size


def test_binary_logits_are_scaled_cosines_and_frozen_trains_only_the_offset(tiny_model):
    import torch
    from transformers import AutoTokenizer, DataCollatorWithPadding

    from kinject.tasks import biencoder

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    first, second = [a for a, _, _ in PAIRS], [b for _, b, _ in PAIRS]
    logits = scores(bi_model(tiny_model, "binary"), tokenizer, first, second)
    assert logits.shape == (len(PAIRS), 2)
    np.testing.assert_allclose(logits[:, 1] - logits[:, 0], biencoder.SCALE * cosines(tiny_model, first, second),
                               atol=1e-4)

    model = bi_model(tiny_model, "regression", frozen=True)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["classifier.bias"]
    batch = DataCollatorWithPadding(tokenizer)([dict(f, labels=1.0) for f in
                                                biencoder.pack(tokenizer, first, second, 64)])
    model.train()
    model(**batch).loss.backward()
    assert model.classifier.bias.grad is not None and model.classifier.bias.grad.abs().item() > 0
    assert all(p.grad is None for n, p in model.named_parameters() if n != "classifier.bias")
    assert torch.equal(model.classifier.weight, torch.ones_like(model.classifier.weight))


def test_contrastive_loss_uses_in_batch_negatives_but_not_other_relevant_passages(tiny_model):
    import torch
    from transformers import AutoTokenizer, DataCollatorWithPadding

    from kinject.tasks import biencoder

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    queries = ["gene expression", "gene expression", "drug dose", "gene expression"]
    passages = ["the gene was expressed", "expression of genes", "the dose of the drug", "a cat sat on the mat"]
    labels = [1, 1, 1, 0]
    model = bi_model(tiny_model, "contrastive").eval()
    batch = DataCollatorWithPadding(tokenizer)([dict(f, labels=y) for f, y in
                                                zip(biencoder.pack(tokenizer, queries, passages, 64), labels)])
    loss = float(model(**batch).loss.detach())
    cos = torch.tensor(np.stack([cosines(tiny_model, [q] * 4, passages) for q in queries]))
    expected = []
    for i in (0, 1, 2):  # anchors: the relevant rows; a query's other relevant passage is no negative of it
        allowed = [j for j in range(4) if j == i or not (queries[j] == queries[i] and labels[j] == 1)]
        row = biencoder.SCALE * cos[i, allowed]
        expected.append(float(-torch.log_softmax(row, 0)[allowed.index(i)]))
    assert loss == pytest.approx(float(np.mean(expected)), rel=1e-3)


# -- the tasks ------------------------------------------------------------------------------------------------ #
def test_tasks_pack_pairs_only_for_a_bi_encoder(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    from kinject.api import Environment
    from kinject.tasks.similarity import BIOSSESTask

    data, tokenizer = write_pairs(tmp_path / "pairs"), AutoTokenizer.from_pretrained(tiny_model)
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path)
    cross = BIOSSESTask(dataset="tsv", path=data)
    examples = cross.examples("train", env)
    features = cross.featurize(tokenizer, examples, 64, env)
    encoded = tokenizer([e["text"] for e in examples], [e["text_pair"] for e in examples], truncation=True,
                        max_length=64)
    assert [f["input_ids"] for f in features] == encoded["input_ids"]  # the cross-encoder as before
    mean, std = cross.target_scale(env)
    assert features[0]["labels"] == pytest.approx((examples[0]["label"] - mean) / std)
    assert "model" not in cross.head_model()

    bi = BIOSSESTask(dataset="tsv", path=data, encoder="bi")
    packed = bi.featurize(tokenizer, examples, 64, env)[0]
    alone = [tokenizer(examples[0][k], truncation=True, max_length=64)["input_ids"] for k in ("text", "text_pair")]
    assert packed["input_ids"] == alone[0] + alone[1]
    assert packed["token_type_ids"] == [0] * len(alone[0]) + [1] * len(alone[1])
    assert packed["labels"] == pytest.approx(examples[0]["label"] / 4)  # the score mapped to [0, 1]
    assert bi.decode(np.array([[0.5]]), env) == [pytest.approx(2.0)]
    assert bi.head_model() == {"model": "kinject.tasks.biencoder:regression"}
    assert BIOSSESTask(encoder="bi-frozen").head_model() == {"model": "kinject.tasks.biencoder:regression_frozen"}


def test_bi_encoder_needs_pairs_one_score_and_the_kernel(tmp_path, textcls_dir, monkeypatch):
    from kinject.api import Environment, SpecError
    from kinject.tasks import biencoder
    from kinject.tasks.textcls import TextClassificationTask

    env = Environment(data_dir=tmp_path, cache_dir=tmp_path)
    monkeypatch.setattr(biencoder, "supported", lambda: True)
    with pytest.raises(SpecError, match="needs text pairs.*task.text_pair_field"):
        TextClassificationTask(path=textcls_dir, encoder="bi").validate(env)
    rows = [{"text": "a b", "second": "b c", "label": label} for label in ("x", "y", "z")]
    (tmp_path / "three").mkdir()
    for split in ("train", "dev", "test"):
        (tmp_path / "three" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SpecError, match="needs a similarity score or two labels.*x, y, z"):
        TextClassificationTask(path=tmp_path / "three", text_pair_field="second", encoder="bi").validate(env)
    monkeypatch.setattr(biencoder, "supported", lambda: False)
    with pytest.raises(SpecError, match="kernel does not apply a task's model transform"):
        TextClassificationTask(path=textcls_dir, encoder="bi").validate(env)


@pytest.mark.slow
def test_hpo_similarity_set_is_graded_disjoint_and_deterministic():
    from kinject.tasks.similarity import hpo_similarity

    splits = hpo_similarity((30, 10, 20), seed=3)
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [30, 10, 20]
    assert {row["label"] for row in splits["test"]} == {0.0, 1.0, 2.0, 3.0, 4.0}
    anchors = [{row["id"].split("-")[1] for row in rows} for rows in splits.values()]
    assert not (anchors[0] & anchors[1] or anchors[0] & anchors[2] or anchors[1] & anchors[2])
    assert hpo_similarity((30, 10, 20), seed=3) == splits
    assert hpo_similarity((30, 10, 40), seed=3)["test"][:20] == splits["test"]  # test drawn first


def test_without_the_kernel_hook_a_bi_encoder_run_is_one_line(tmp_path, tiny_model, capsys):
    if kernel_applies_head_models():
        pytest.skip("this kernel applies Head.model")
    capsys.readouterr()
    assert kinject("run", "finetune", "--task", "biosses", "--model", "tiny", "--set", "task.dataset=tsv",
                   "--set", f"task.path={write_pairs(tmp_path / 'pairs')}", "--set", "task.encoder=bi",
                   "-o", str(tmp_path / "run")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "task.encoder=bi: this kinject's kernel does not apply" in err[0]


# -- end to end through the shared fine-tune body ------------------------------------------------------------- #
def run_pairs(tmp_path, data, name: str, encoder: str, *extra: str) -> Path:
    out = tmp_path / name
    assert kinject("run", "finetune", "--task", "biosses", "--model", "tiny", "--set", "task.dataset=tsv",
                   "--set", f"task.path={data}", "--set", f"task.encoder={encoder}", "--set", "training.max_steps=4",
                   "--set", "training.batch_size=8", "--set", "hooks.knowledge-probe.enabled=false", "-o", str(out), *extra) == 0
    return out


@needs_kernel
@pytest.mark.slow
def test_similarity_cross_bi_and_zero_shot_runs_compare_on_the_same_pairs(tmp_path, tiny_model, capsys):
    from scipy.stats import pearsonr
    from transformers import AutoModel

    data = write_pairs(tmp_path / "pairs")
    cross, bi, zero = (run_pairs(tmp_path, data, name, name.replace("zero", "bi-frozen"))
                       for name in ("cross", "bi", "zero"))
    records = [json.loads(line) for line in open(zero / "predictions" / "test.jsonl")]
    rows = [line.split("\t") for line in (data / "test.tsv").read_text().splitlines()[1:]]
    reference = cosines(tiny_model, [r[1] for r in rows], [r[2] for r in rows])
    assert [r["id"] for r in records] == [r[0] for r in rows]
    pred = np.array([r["pred"] for r in records])
    assert pearsonr(pred, reference)[0] == pytest.approx(1.0, abs=1e-4)  # the untrained cosine, shifted
    metrics = json.loads((zero / "metrics.json").read_text())
    assert metrics["test"]["pearson"] == pytest.approx(pearsonr(reference, [r["gold"] for r in records])[0], abs=1e-3)

    config = json.loads((bi / "model" / "config.json").read_text())
    assert config["kinject_head_model"] == "kinject.tasks.biencoder:regression"
    assert type(AutoModel.from_pretrained(bi / "model")).__name__ == "BertModel"
    assert "kinject_head_model" not in json.loads((cross / "model" / "config.json").read_text())
    capsys.readouterr()
    assert kinject("compare", str(cross), str(bi), str(zero), "--json", "--resamples", "200") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["examples"] == 8 and not result["warnings"]  # metrics.json agrees with the predictions
    rows = result["metrics"][0]["rows"]
    assert result["metrics"][0]["metric"] == "pearson" and len(rows) == 3
    assert rows[2]["value"] == pytest.approx(metrics["test"]["pearson"], abs=1e-6)
    evaluate = ["eval", str(bi / "model"), "--task", "biosses", "--set", "task.dataset=tsv", "--set", f"task.path={data}"]
    assert kinject(*evaluate, "--set", "task.encoder=bi") == 0  # loaded with its transform (config.json names it)
    shown = capsys.readouterr().out
    assert f"{json.loads((bi / 'metrics.json').read_text())['test']['pearson']:.4f}" in shown
    assert kinject(*evaluate) == 2  # pairs read as one sequence by a bi-encoder: refused, not scored
    assert "trained with the task model kinject.tasks.biencoder:regression" in capsys.readouterr().err


@needs_kernel
@pytest.mark.slow
def test_retrieval_bi_encoder_ranks_by_cosine(tmp_path, tiny_model):
    data = write_queries(tmp_path / "capr")
    runs = {}
    for encoder, loss in (("bi", "contrastive"), ("bi", "binary"), ("bi-frozen", "contrastive")):
        out = tmp_path / f"{encoder}-{loss}"
        assert kinject("run", "finetune", "--task", "capr", "--model", "tiny", "--set", "task.dataset=jsonl",
                       "--set", f"task.path={data}", "--set", f"task.encoder={encoder}", "--set",
                       f"task.bi_loss={loss}", "--set", "training.max_steps=3", "--set", "training.batch_size=8",
                       "--set", "hooks.knowledge-probe.enabled=false", "-o", str(out)) == 0
        runs[(encoder, loss)] = out
        metrics = json.loads((out / "metrics.json").read_text())["test"]
        assert metrics["queries"] == 6 and 0 <= metrics["mrr"] <= 1
    records = [json.loads(line) for line in open(runs[("bi-frozen", "contrastive")] / "predictions" / "test.jsonl")]
    query = json.loads((data / "test.jsonl").read_text().splitlines()[0])
    record = next(r for r in records if r["id"] == query["qid"])
    texts = {c["pid"]: c["text"] for c in query["candidates"]}
    reference = cosines(tiny_model, [query["query"]] * len(texts), [texts[p] for p in record["ranking"]])
    assert list(reference) == sorted(reference, reverse=True)  # ranked by the untrained cosine
