"""BLURB HoC, GAD, BIOSSES, EBM-NLP PICO and the `blurb` group: readers, errors, scoring, BLURB score."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kinject.errors import DataError
from kinject.interfaces import Environment
from kinject.registry import registry


def task(name: str, **options):
    return registry("tasks").get(name)(**options)


def write_splits(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        (folder / f"{split}.tsv").write_text(text, encoding="utf-8")
    return folder


def hoc_row(flags: set[int], sentence: str, index: str) -> str:
    return ",".join(f"{k}_{int(k in flags)}" for k in range(10)) + f"\t{sentence}\t{index}"


def test_hoc_scores_abstracts_not_sentences(tmp_path):
    rows = ["labels\tsentence\tindex", hoc_row({0}, "a", "11_s0"), hoc_row({3}, "b", "11_s1"),
            hoc_row(set(), "c", "22_s0"), hoc_row({3}, "d", "22_s1")]
    write_splits(tmp_path / "hoc", "\n".join(rows) + "\n")
    env = Environment(tmp_path, tmp_path)
    hoc = task("hoc")
    examples = hoc.examples("test", env)
    assert [ex["label"] for ex in examples][:2] == [["invasion_metastasis"], ["replicative_immortality"]]
    labels = hoc.labels(env)
    logits = np.full((4, 10), -5.0)
    logits[1, labels.index("invasion_metastasis")] = 5.0  # sentence-level mistake, right at abstract level
    logits[0, labels.index("replicative_immortality")] = 5.0
    logits[3, labels.index("replicative_immortality")] = 5.0
    out = hoc.score("test", examples, [], logits, env)
    assert out["abstracts"] == 2.0
    assert out["f1_micro"] == 1.0
    assert out["f1_macro"] == pytest.approx(2 / 10)  # mean over all 10 hallmarks; absent ones score 0 (sklearn)
    logits[3] = -5.0  # abstract 22 loses hallmark 3: hallmark-3 F1 = 2/3, hallmark-0 F1 = 1 -> macro over 10
    out = hoc.score("test", examples, [], logits, env)
    assert out["f1_micro"] == pytest.approx(2 * 2 / (2 * 2 + 1))
    assert out["f1_macro"] == pytest.approx((1 + 2 / 3) / 10)  # hallmarks never present score 0, as sklearn


@pytest.mark.parametrize("bad,where,what", [("1_0,2_1\tx\t5_s0", ":2", "expected 10 label items"),
                                            ("0_0\tx", ":2", "expected 3 columns")])
def test_hoc_bad_rows(tmp_path, bad, where, what):
    path = write_splits(tmp_path / "hoc", f"labels\tsentence\tindex\n{bad}\n") / "train.tsv"
    with pytest.raises(DataError, match=what) as info:
        task("hoc").validate(Environment(tmp_path, tmp_path))
    assert str(info.value).startswith(f"{path}{where}")


def test_gad_reads_fixture_and_rejects_unknown_label(tmp_path):
    text = "index\tsentence\tlabel\n0\t@GENE$ variants raise @DISEASE$ risk .\t1\n1\t@GENE$ and @DISEASE$ .\t0\n"
    write_splits(tmp_path / "gad", text)
    env = Environment(tmp_path, tmp_path)
    gad = task("gad")
    gad.check(env)
    assert [ex["label"] for ex in gad.examples("train", env)] == ["1", "0"]
    assert gad.primary_metric() == "f1_binary"
    logits = np.array([[0.0, 2.0], [0.0, 1.0]])  # predicts 1, 1: precision 1/2, recall 1
    assert gad.score("test", gad.examples("test", env), [], logits, env)["f1_binary"] == pytest.approx(2 / 3)
    (tmp_path / "gad" / "dev.tsv").write_text(text.replace("\t0\n", "\tmaybe\n"))
    with pytest.raises(DataError, match=r"dev.tsv:3: unknown label 'maybe'"):
        task("gad").validate(env)


def test_gad_is_reachable_as_declared_in_relation_module():
    from kinject.tasks.gad import GADTask

    assert registry("tasks").get("gad") is GADTask  # entry point kinject.tasks.relation:GADTask; no data needed


def test_biosses_regression_pearson_and_score_range(tmp_path, tiny_model):
    from kinject.api import load_tokenizer

    text = "pair_id\tsent1\tsent2\tscore\n" + "".join(f"p{i}\tgene {i} rises\tprotein {i} falls\t{i % 5}\n"
                                                       for i in range(5))
    write_splits(tmp_path / "biosses", text)
    env = Environment(tmp_path, tmp_path)
    sim = task("biosses")
    head = sim.head(env)
    assert (head.num_labels, head.problem_type) == (1, "regression")
    examples = sim.examples("test", env)
    features = sim.featurize(load_tokenizer(tiny_model), examples, 64, env)
    # targets standardised by the train split's mean 2 and std sqrt(2), so a fresh head starts at the mean
    assert np.allclose([f["labels"] for f in features], (np.arange(5) - 2.0) / np.sqrt(2.0))
    assert all(0 in f["token_type_ids"] and 1 in f["token_type_ids"] for f in features)  # both sentences encoded
    assert np.allclose(sim.decode(np.array([[0.0], [np.sqrt(2.0)]]), env), [2.0, 4.0])  # back to 0-4
    raw = (np.array([[0.0], [1.1], [1.9], [3.2], [3.9]]) - 2.0) / np.sqrt(2.0)
    out = sim.score("test", examples, features, raw, env)
    assert out["pearson"] > 0.99
    records = sim.predictions("test", examples, features, raw, env)
    assert np.allclose([r["pred"] for r in records], [0.0, 1.1, 1.9, 3.2, 3.9]) and records[4]["gold"] == 4.0
    (tmp_path / "biosses" / "test.tsv").write_text(text.replace("\t4\n", "\t4.5\n"))
    with pytest.raises(DataError, match=r"test.tsv:6: score '4.5'"):
        task("biosses").validate(env)


# -- EBM-NLP PICO fixture -------------------------------------------------------------------------- #
DOCS = {  # pmid -> (tokens, participants, interventions, outcomes)
    "101": ("Adults with asthma received drug X . Lung function improved .".split(),
            [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0]),
    "202": ("Children given placebo had fewer attacks .".split(),
            [1, 1, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0]),
}


def write_ebm(root: Path, docs: dict, sub: str) -> Path:
    (root / "documents").mkdir(parents=True, exist_ok=True)
    for pmid, (tokens, *flags) in docs.items():
        (root / "documents" / f"{pmid}.tokens").write_text("\n".join(tokens) + "\n")
        for element, values in zip(("participants", "interventions", "outcomes"), flags):
            folder = root / "annotations/aggregated/starting_spans" / element / sub
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{pmid}.AGGREGATED.ann").write_text(",".join(map(str, values)))
    return root


def test_pico_loader_sentences_overlap_and_splits(tmp_path):
    root = write_ebm(tmp_path / "ebm_nlp_2_00", DOCS, "train")
    write_ebm(root, {"202": DOCS["202"]}, "test/gold")
    env = Environment(tmp_path, tmp_path)
    pico = task("ebmpico", dev_fraction=0.0)
    train = pico.examples("train", env)
    assert [ex["words"][0] for ex in train] == ["Adults", "Lung", "Children"]  # 3 sentences, 2 abstracts
    assert train[0]["tags"][:6] == ["B-PAR", "I-PAR", "I-PAR", "O", "B-INT", "I-INT"]
    child = train[2]
    # "placebo" is in participants (span of 3) and interventions (span of 1): the inner span wins for training,
    # both elements stay in the gold used for scoring
    assert child["tags"][:3] == ["B-PAR", "I-PAR", "B-INT"]
    assert child["elements"][2] == ["participants", "interventions"]
    assert len(pico.examples("test", env)) == 1
    everything_dev = task("ebmpico", dev_fraction=0.999)
    assert len(everything_dev.examples("dev", env)) == 3
    with pytest.raises(DataError, match="no annotated abstracts"):
        everything_dev.examples("train", env)


def test_pico_word_f1_from_predicted_tags(tmp_path, tiny_model):
    from kinject.api import load_tokenizer

    root = write_ebm(tmp_path / "ebm_nlp_2_00", DOCS, "train")
    write_ebm(root, DOCS, "test/gold")
    env = Environment(tmp_path, tmp_path)
    pico = task("ebmpico", dev_fraction=0.0)
    examples = pico.examples("test", env)
    features = pico.featurize(load_tokenizer(tiny_model), examples, 32, env)
    width = max(len(f["input_ids"]) for f in features)
    logits = np.zeros((len(features), width, len(pico.labels(env))))
    for i, feat in enumerate(features):
        for pos, label in enumerate(feat["labels"]):
            logits[i, pos, max(label, 0)] = 1.0
    out = pico.score("test", examples, features, logits, env)
    # perfect single-label predictions miss only the overlapping word's second element (placebo, participants)
    assert out["pico_f1_interventions"] == 1.0 and out["pico_f1_outcomes"] == 1.0
    assert out["pico_f1_participants"] == pytest.approx(2 * 5 / (2 * 5 + 1))
    assert out["pico_f1"] == pytest.approx((2 + 10 / 11) / 3)


def test_pico_token_label_count_mismatch_names_file(tmp_path):
    root = write_ebm(tmp_path / "ebm_nlp_2_00", DOCS, "train")
    bad = root / "annotations/aggregated/starting_spans/outcomes/train/202.AGGREGATED.ann"
    bad.write_text("0,1")
    with pytest.raises(DataError, match="2 labels but 7 tokens") as info:
        task("ebmpico").examples("train", Environment(tmp_path, tmp_path))
    assert str(info.value).startswith(f"{bad}:1")


# -- BLURB group ----------------------------------------------------------------------------------- #
def test_blurb_score_is_macro_over_task_types_and_names_missing():
    group = task("blurb")
    metrics = {"bc5chem": {"test": {"entity_f1": 0.9}}, "ncbi-disease": {"test": {"entity_f1": 0.8}},
               "hoc": {"test": {"f1_macro": 0.6}}, "biosses": {"test": {"pearson": 0.5}}}
    summary = group.summarize(metrics, Environment(Path("."), Path(".")))
    assert summary["types"] == {"ner": pytest.approx(0.85), "document_classification": 0.6,
                                "sentence_similarity": 0.5}
    assert summary["blurb_score"] == pytest.approx((0.85 + 0.6 + 0.5) / 3)
    assert summary["complete"] is False
    assert set(summary["missing_types"]) == {"pico", "relation_extraction", "question_answering"}
    assert "jnlpba" in summary["missing_datasets"] and "bc5chem" not in summary["missing_datasets"]


@pytest.mark.slow
def test_blurb_group_runs_available_members_and_skips_missing(tmp_path, tiny_model, capsys):
    from kinject.cli.app import main

    text = "pair_id\tsent1\tsent2\tscore\n" + "".join(f"p{i}\tgene {i}\tprotein {i}\t{i % 5}\n" for i in range(6))
    write_splits(tmp_path / "data" / "biosses", text)
    out = tmp_path / "run"
    try:
        main(["run", "finetune", "--task", "blurb", "--model", "tiny", "--data-dir", str(tmp_path / "data"),
              "--set", "task.members=[biosses,gad]", "--set", "training.epochs=1", "-o", str(out)])
    except SystemExit as exc:
        assert not exc.code
    summary = json.loads((out / "metrics.json").read_text())
    assert set(summary["datasets"]) == {"biosses"} and "gad" in summary["missing_datasets"]
    assert summary["types"].keys() == {"sentence_similarity"}
    assert summary["blurb_score"] == summary["datasets"]["biosses"]["value"]


@pytest.mark.data
def test_real_hoc_abstract_counts(data_dir):
    if not (data_dir / "hoc").is_dir():
        pytest.skip("no hoc")
    hoc = task("hoc")
    assert hoc.info.count(data_dir / "hoc") == {"train": 1295, "dev": 186, "test": 371}
    train = hoc.examples("train", Environment(data_dir, data_dir))
    assert len(train) == 12119
    positives = [sum(h in ex["label"] for ex in train) for h in hoc.labels(Environment(data_dir, data_dir))]
    assert positives == [448, 185, 136, 219, 268, 523, 238, 602, 674, 375]
