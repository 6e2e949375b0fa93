"""The automatic choice (kinject.defaults.choose, in the one path every entry point takes: kinject.api.prepare_runs): fold runs are plain fine-tunes keeping their last weights, whatever the run's strategy
and sources; a split too small for the folds skips the choice in one announced line; KINJECT_CHOOSE is read
strictly; a tie keeps the run's default and no value is shown as None; the cost is counted and recorded."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from helpers import one_line_error, write_corpus, write_kg


def write_labelled(folder: Path, labels: list[str], n_eval: int = 6, seed: int = 0) -> Path:
    """train.jsonl with one example per entry of ``labels``; dev/test with ``n_eval`` examples of its labels."""
    rng = random.Random(seed)
    words = "gene drug dose rash toxicity variant allele therapy nausea".split()
    folder.mkdir(parents=True, exist_ok=True)
    kinds = sorted(set(labels))
    for split, names in (("train", labels), ("dev", [kinds[i % len(kinds)] for i in range(n_eval)]),
                         ("test", [kinds[i % len(kinds)] for i in range(n_eval)])):
        (folder / f"{split}.jsonl").write_text("".join(
            json.dumps({"text": " ".join(rng.choice(words) for _ in range(5)) + f" {label}", "label": label}) + "\n"
            for label in names))
    return folder


def three_labels(n: int) -> list[str]:
    return [("treatment", "genetic", "adverse")[i % 3] for i in range(n)]


def base_spec(tmp_path: Path, data: Path, **extra) -> dict:
    return {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(data)},
            "cache_dir": str(tmp_path / "cache"), "choose": True, "hooks": {"knowledge-probe": {"enabled": False}},
            **extra}


def strategy_extras(tmp_path: Path) -> dict[str, dict]:
    kg, corpus = write_kg(tmp_path / "kg.tsv"), write_corpus(tmp_path / "corpus.txt")
    triples = [{"name": "triples", "path": str(kg)}]
    return {"kimera": {"sources": triples}, "context": {"sources": triples},
            "mop": {"sources": triples, "strategy": {"name": "mop", "partitions": 2}},
            "pretrain": {"sources": [{"name": "corpus", "paths": [str(corpus)]}]}}


def test_fold_runs_are_plain_finetunes_keeping_the_last_weights_for_every_knowledge_strategy(
        tmp_path, tiny_model, monkeypatch):
    """kimera, context, mop (a triples source) and pretrain (a corpus) on a 141-example split: each fold run is
    prepared (the error of #40 was raised there) as a plain fine-tune without sources, scored on its fold only,
    with selection=last even when the user asked for best; one progress line per fold run; a tie keeps the
    run's default, shown by its value, never None; the cost is recorded."""
    import kinject.api as api
    import kinject.engine as engine

    data = write_labelled(tmp_path / "d141", three_labels(141), n_eval=30)
    seen: list = []

    def fake_execute(run, out):  # every alternative scores the same: a tie
        seen.append(run)
        return {"dev": {"accuracy": 0.5}}

    monkeypatch.setattr(engine, "execute", fake_execute)
    bases = []
    for name, extra in strategy_extras(tmp_path).items():
        spec = base_spec(tmp_path, data, **{"strategy": {"name": name}, **extra})
        spec["training"] = {"selection": "best"}
        spec["defaults"] = {"folds": 3}
        said: list[str] = []
        seen.clear()
        shutil.rmtree(tmp_path / "cache" / "choices", ignore_errors=True)  # the same fold runs: a cached choice
        run, = api.prepare_runs(api.build_spec(spec), announce=said.append)
        assert run.strategy.name == name and run.chosen["fold_runs"] == 6 == len(seen)
        for fold in seen:
            assert fold.strategy.name == "finetune" and fold.sources == [] and fold.spec.fold
            assert fold.spec.training.selection == "last" and fold.spec.training.eval_splits == ["dev"]
        assert len({fold.spec.fold for fold in seen}) == 3
        progress = [line for line in said if line.strip().startswith("choice: fold")]
        assert len(progress) == 6 and "choice: fold 3/3 of alternative 2/2" in progress[-1]
        assert run.chosen["tie"] and run.chosen["chosen"] == {"training.head_learning_rate": None}  # the default: the encoder's rate
        assert "None" not in "\n".join(said) and "(the encoder's rate)" in "\n".join(said)
        chose = [line for line in said if ": chose " in line]
        assert len(chose) == 1 and "a tie" in chose[0] and run.decided_by["chosen"] == "kinject.defaults.choose"
        bases.append(json.dumps(seen[0].spec.model_dump(mode="json", exclude={"strategy"}), sort_keys=True,
                                default=str))
    assert len(set(bases)) == 1  # the same plain fine-tune whatever the strategy


@pytest.mark.parametrize("labels, why", [
    (three_labels(40) + ["rare"], "label 'rare' has 1 example(s), fewer than 5 folds"),
    (["treatment", "genetic"], "2 example(s) in 2 unit(s), fewer than 5 folds"),
    (["treatment", "genetic", "adverse"], "3 example(s) in 3 unit(s), fewer than 5 folds")])
def test_a_split_too_small_for_the_folds_skips_the_choice_in_one_line(tmp_path, tiny_model, labels, why):
    from kinject.api import build_spec, prepare_runs

    data = write_labelled(tmp_path / "small", labels)
    said: list[str] = []
    run, = prepare_runs(build_spec(base_spec(tmp_path, data)), announce=said.append)
    choice = [line for line in said if "the choice" in line]  # (the default rules' lines follow it)
    assert len(choice) == 1 and "the choice of training.head_learning_rate is skipped" in choice[0] and why in choice[0]
    assert "the run keeps training.head_learning_rate=5e-05 (the encoder's rate)" in choice[0]
    assert said[0] == choice[0] and all(line.endswith("(set it to override)") for line in said[1:])
    assert run.chosen["skipped"] == why and run.chosen["fold_runs"] == 0
    assert run.spec.training.head_learning_rate is None  # the encoder's rate: the head-rate rule is off by default


@pytest.mark.slow
def test_the_rare_class_and_two_example_splits_run_to_the_end(tmp_path, tiny_model, capsys):
    """#40: these failed with `train.jsonl:40: unknown label 'pos'` before; now the choice is skipped, announced."""
    from helpers import run_kinject

    for name, labels in (("rare", three_labels(40) + ["pos"]), ("two", ["treatment", "genetic"])):
        data = write_labelled(tmp_path / name, labels)
        capsys.readouterr()
        assert run_kinject("run", "finetune", "--task", "textcls", "--set", f"task.path={data}", "--model", "tiny",
                           "--set", "choose=true", "--set", "training.max_steps=1", "--set",
                           "hooks.knowledge-probe.enabled=false", "--cache-dir", str(tmp_path / "cache"),
                           "-o", str(tmp_path / f"run-{name}")) == 0
        printed = " ".join(capsys.readouterr().out.split())
        assert printed.count("is skipped") == 1
        assert json.loads((tmp_path / f"run-{name}" / "run.json").read_text())["chosen"]["skipped"]


@pytest.mark.parametrize("value, on", [("0", False), ("false", False), ("No", False), ("off", False),
                                       ("1", True), ("true", True), ("yes", True), ("ON", True)])
def test_kinject_choose_is_read_strictly(monkeypatch, value, on):
    from kinject.api import build_spec
    from kinject.defaults import choice_enabled as enabled

    monkeypatch.setenv("KINJECT_CHOOSE", value)
    assert enabled(build_spec({"model": {"name": "tiny"}})) is on
    assert enabled(build_spec({"model": {"name": "tiny"}, "choose": not on})) is (not on)  # the spec wins


def test_an_unknown_kinject_choose_is_one_line(tmp_path, textcls_dir, tiny_model, monkeypatch, capsys):
    monkeypatch.setenv("KINJECT_CHOOSE", "maybe")
    line = one_line_error(capsys, ["run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}",
                                   "--model", "tiny", "-o", str(tmp_path / "run")])
    assert "KINJECT_CHOOSE='maybe'" in line and "0/false/no/off or 1/true/yes/on" in line
    assert not (tmp_path / "run").exists()


def test_quick_skips_the_choice_and_dry_run_counts_the_fold_runs(tmp_path, textcls_dir, tiny_model, capsys,
                                                                monkeypatch):
    from helpers import run_kinject

    monkeypatch.setenv("KINJECT_CHOOSE", "1")  # on, as for a user (the suite turns it off)
    args = ["run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny",
            "--set", "hooks.knowledge-probe.enabled=false", "--cache-dir", str(tmp_path / "cache"), "--dry-run"]
    capsys.readouterr()
    assert run_kinject(*args, "--quick") == 0
    quick = " ".join(capsys.readouterr().out.split())
    assert "a quick try (--quick) skips it (--set choose=true runs it: 10 fold runs first)" in quick
    assert run_kinject(*args) == 0
    planned = " ".join(capsys.readouterr().out.split())
    assert "textcls: the train split has 48 examples (< 1000): 10 fold runs of the choice first" in planned
    assert "choice: 10 fold runs of the choice first" in planned  # beside the estimate
    assert not (tmp_path / "cache" / "choices").exists()  # a dry run runs no fold


@pytest.fixture(scope="module")
def shared_141(tmp_path_factory):
    """A 141-example, 3-label train split, a graph, a corpus and one cache for the end-to-end runs below."""
    root = tmp_path_factory.mktemp("choice-e2e")
    return {"root": root, "data": write_labelled(root / "d141", three_labels(141), n_eval=30),
            "extras": strategy_extras(root)}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["kimera", "context", "pretrain"])
def test_knowledge_strategies_run_to_the_end_with_the_choice_on(shared_141, tiny_model, strategy, capsys):
    """#40's first finding: these exited 2 (`strategy 'finetune' does not use a triples source`). The first run
    pays the fold runs; the others reuse the choice (their fold runs are the same plain fine-tunes)."""
    from helpers import run_kinject

    root, extra = shared_141["root"], shared_141["extras"][strategy]
    sources = json.dumps(extra["sources"])
    out = root / f"run-{strategy}"
    capsys.readouterr()
    assert run_kinject("run", strategy, "--task", "textcls", "--set", f"task.path={shared_141['data']}", "--model",
                       "tiny", "--set", f"sources={sources}", "--set", "protocol=quick", "--set", "choose=true",
                       "--set", "training.max_steps=2", "--set", "defaults.folds=2", "--set",
                       "hooks.knowledge-probe.enabled=false", "--cache-dir", str(root / "cache"), "-o", str(out)) == 0
    printed = " ".join(capsys.readouterr().out.split())
    chosen = json.loads((out / "run.json").read_text())["chosen"]
    assert chosen["fold_runs"] == 4 and set(chosen["chosen"]) == {"training.head_learning_rate"}
    assert "textcls: chose training.head_learning_rate=" in printed and "=None" not in printed
    assert (out / "predictions" / "test.jsonl").is_file()
