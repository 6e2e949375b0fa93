"""Knowledge on one footing (kinject.facts, the knowledge library's held-out facts): facts held out of every
source of every strategy, the dose a run consumed (metrics.json ``dose``), one dose setting for every strategy
(``knowledge.epochs``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import run_kinject as kinject

HELD = [("gene 00", "causes", "protein 01"), ("protein 01", "treats", "cell 02"), ("drug 10", "is a", "dose 11")]


def test_held_out_facts_match_name_pairs_either_way_and_texts_that_name_both():
    from kinject.api import fact_key
    from kinject.api import HeldOutFacts

    facts = HeldOutFacts([("Seizure", "is a", "Abnormality of the nervous system")])
    assert facts.blocks_triple("seizure", "Abnormality of the Nervous System")
    assert facts.blocks_triple("Abnormality of the nervous system", "Seizure")  # either direction, any relation
    assert not facts.blocks_triple("Seizure", "Abnormality of the eye")
    assert facts.blocks_text("A seizure is an abnormality of the nervous system.")
    assert not facts.blocks_text("A seizure is sudden.") and not facts.blocks_text("Seizures are an abnormality "
                                                                                   "of the nervous system")
    assert fact_key("Seizure", "is a", "Eye") == fact_key("seizure,", "IS  A", "eye.") != fact_key("Eye", "is a",
                                                                                                    "Seizure")
    assert len(facts) == 1 and facts.digest == HeldOutFacts([("seizure", "x", "abnormality of the nervous "
                                                                               "system")]).digest


def test_every_source_is_filtered_with_the_held_out_facts_and_their_digest_keys_the_hold_out(tmp_path):
    """The held-out set a HoldOutRef builds (kinject.facts) is what a source is filtered with: its triples that link
    two held-out names are gone, the others kept; the set is built once per content in a process."""
    from kinject.api import Environment, HeldOutFacts, HoldOutRef, SourceRef, registry

    kg, held = _kg_and_facts(tmp_path)
    ref = HoldOutRef(file=str(held))
    built = ref.held_out()
    assert isinstance(built, HeldOutFacts) and len(built) == 3
    assert HoldOutRef(file=str(held)).held_out() is built  # one read per content
    source = registry("sources").get("triples")
    source = source(source.Config(path=str(kg)))
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    held_ref = SourceRef.of(source, env).holding_out(ref)
    kept = {(t.head, t.tail) for t in held_ref.build().iter_triples(env)}
    assert not {fact[::2] for fact in HELD} & kept and kept
    assert held_ref.build().removed >= 3


def _kg_and_facts(tmp_path: Path) -> tuple[Path, Path]:
    from helpers import write_kg

    kg = write_kg(tmp_path / "kg.tsv")
    lines = kg.read_text().splitlines() + [f"{h}\t{r}\t{t}" for h, r, t in HELD]
    kg.write_text("\n".join(lines) + "\n")
    facts = tmp_path / "held.tsv"
    facts.write_text("# the facts no method may see\n" + "".join(f"{h}\t{r}\t{t}\n" for h, r, t in HELD))
    return kg, facts


def _source_refs(value):
    from pydantic import BaseModel

    from kinject.api import SourceRef

    if isinstance(value, SourceRef):
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _source_refs(getattr(value, name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _source_refs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _source_refs(item)


@pytest.mark.slow
def test_every_source_of_every_strategy_holds_the_facts_out_and_the_run_records_them(tmp_path, textcls_dir,
                                                                                     tiny_model):
    from kinject.api import Environment, build_spec, prepare, words

    kg, held = _kg_and_facts(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("gene 00 causes protein 01 in tumor cells.\nthe drug dose reduced symptoms of disease.\n" * 20)
    base = {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(textcls_dir)},
            "cache_dir": str(tmp_path / "cache"), "knowledge": {"exclude_file": str(held)}}
    triples = [{"name": "triples", "path": str(kg)}]
    runs = {"kimera": {"sources": triples}, "mop": {"sources": triples, "strategy": {"name": "mop", "partitions": 2}},
            "context": {"sources": triples},
            "pretrain": {"sources": [{"name": "corpus", "paths": [str(corpus)]}]}}
    pairs = {tuple(sorted((words(h), words(t)))) for h, _, t in HELD}
    for name, extra in runs.items():
        run = prepare(build_spec({**base, "strategy": {"name": name}, **extra}))
        assert run.holdout is not None and run.holdout.facts == 3, name
        refs = [ref for stage in run.stages for ref in _source_refs(stage.config)]
        assert refs and all(ref.holdout is not None and ref.holdout.digest == run.holdout.digest for ref in refs), name
        for ref in refs:
            env = Environment(data_dir=Path(ref.data_dir), cache_dir=tmp_path / "cache")
            source = ref.build()
            if ref.kind == "triples":
                seen = {tuple(sorted((words(t.head), words(t.tail)))) for t in source.iter_triples(env)}
                assert seen and not seen & pairs, name
                if ref.name == "triples":  # the file's graph (the probe of a corpus run asks about the HPO)
                    assert source.removed >= 3, name  # the three added edges (and any other linking the names)
            else:
                texts = list(source.iter_texts(env))
                assert texts and not any("gene 00" in t and "protein 01" in t for t in texts), name
    # the hold-out is part of the key: without it the retraining is another stage
    plain = prepare(build_spec({**base, "knowledge": {}, "strategy": {"name": "kimera"}, "sources": triples}))
    assert plain.holdout is None
    with_file = prepare(build_spec({**base, "strategy": {"name": "kimera"}, "sources": triples}))
    from kinject.api import plan

    keys = [{p.stage.name: p.key for p in plan(r)}["kimera-retrain"] for r in (plain, with_file)]
    assert keys[0] != keys[1]


@pytest.mark.slow
def test_a_held_out_fact_never_reaches_kimera_rows_mop_partitions_or_a_pretraining_corpus(tmp_path, textcls_dir,
                                                                                         tiny_model):
    """End to end: each method's dose (the facts its steps consumed) holds none of the held-out facts, and its
    run.json says how many were held out."""
    from kinject.api import fact_key

    kg, held = _kg_and_facts(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"{h} {r} {t}.\n" for h, r, t in HELD) +
                      "".join(f"gene 0{i} causes cell 1{i} in tumor tissue.\n" for i in range(40)))
    held_keys = {fact_key(*f) for f in HELD}
    common = ["--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny", "--quick",
              "--set", f"knowledge.exclude_file={held}", "--set", "hooks.knowledge-probe.enabled=false"]
    cases = {"kimera": ["--set", f"sources=[{{name: triples, path: {kg}}}]", "--set", "strategy.variant=no-mask",
                        "--set", "knowledge.epochs=2"],
             "mop": ["--set", f"sources=[{{name: triples, path: {kg}}}]", "--set", "knowledge.epochs=2"],
             "pretrain": ["--set", f"sources=[{{name: corpus, paths: [{corpus}]}}]", "--set", "knowledge.epochs=2"]}
    for name, extra in cases.items():
        out = tmp_path / name
        assert kinject("run", name, *common, *extra, "-o", str(out)) == 0, name
        info = json.loads((out / "run.json").read_text())
        assert info["knowledge"]["held_out"]["facts"] == 3 and info["knowledge"]["epochs"] == 2
        dose = json.loads((out / "metrics.json").read_text())["dose"]
        assert dose["distinct"] > 0 and dose["epochs"] >= 1.9, (name, dose)  # two epochs asked, two consumed
        assert dose["distinct"] == dose["available"]  # >= 1 epoch covers every fact (triples or texts)
        covered = set()
        for folder in (Path(r["dir"]) for r in info["stages"]):
            if (folder / "dose-facts.npy").exists():
                covered |= set(np.load(folder / "dose-facts.npy").tolist())
        assert covered and not covered & held_keys, name
        if name != "pretrain":
            assert dose["held_out"] >= 3 and dose["unit"] == "triples"  # triples removed (any linking the names)
        else:  # the corpus lost the three texts that stated a held-out fact
            corpus_stats = json.loads(next(Path(r["dir"]) for r in info["stages"]
                                           if r["name"] == "pretrain-corpus").joinpath("corpus.json").read_text())
            assert corpus_stats["held_out_fact_texts"] == 3 and dose["unit"] == "texts"


@pytest.mark.slow
def test_the_dose_counts_what_the_steps_consumed(tmp_path, textcls_dir, tiny_model):
    """KIMERA's dose is the rows its batches took: kg_steps x batch rows, the triples those rows state; a digest
    that two runs with the same steps share and a longer run does not."""
    from helpers import write_kg

    kg = write_kg(tmp_path / "kg.tsv")
    doses = {}
    for steps in (3, 3, 12):
        out = tmp_path / f"k{steps}-{len(doses)}"
        assert kinject("run", "kimera", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny",
                       "--quick", "--set", f"sources=[{{name: triples, path: {kg}}}]", "--set",
                       "strategy.variant=no-mask", "--set", f"strategy.kg_steps={steps}", "--set",
                       "strategy.kg_batch_size=4", "--set", "hooks.knowledge-probe.enabled=false", "-o", str(out)) == 0
        doses[len(doses)] = json.loads((out / "metrics.json").read_text())["dose"]
    short, again, longer = doses[0], doses[1], doses[2]
    assert 9 <= short["rows_seen"] <= 12 and 36 < longer["rows_seen"] <= 48  # steps x batch size (a last batch of a
    #                                                                          task's rows may be partial)
    assert short["digest"] == again["digest"] and short["digest"] != longer["digest"]
    assert short["distinct"] <= short["seen"] <= 12 and longer["distinct"] >= short["distinct"]
    assert 0 < short["epochs"] < longer["epochs"] < 1 and short["available"] == longer["available"] <= 121
    assert short["tokens"] > 0


def test_knowledge_epochs_is_one_setting_a_grid_varies(tmp_path):
    from kinject.experiments.grid import load_grid

    grid = tmp_path / "g.yaml"
    grid.write_text("seeds: [1]\ntasks: [hpo-isa]\nstrategies:\n  finetune: {}\n  kimera:\n"
                    "    settings: {sources: [{name: hpo, include: [isa]}]}\n"
                    "    vary: {knowledge.epochs: {values: [0.1, 1.0], name: ep}}\n")
    cells = load_grid(grid).cells
    assert sorted(c.system for c in cells) == ["finetune", "kimera-ep0.1", "kimera-ep1.0"]
    assert {c.data.get("knowledge", {}).get("epochs") for c in cells} == {None, 0.1, 1.0}
    # every arm probed on the graph the knowledge arm injects (the baseline included)
    assert all(c.data["hooks"]["knowledge-probe"]["source"] == {"name": "hpo", "include": ["isa"]} for c in cells)


def test_hpo_isa_declares_the_edges_its_items_ask_about_and_the_default_holds_dev_and_test_out(tmp_path, tiny_model):
    from kinject.api import Environment, build_spec, prepare, registry

    task = registry("tasks").get("hpo-isa")()
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path)
    test = task.facts("test", env)
    assert len(test) == 500 and all(t.relation == "is a" for t in test)
    positives = {(r["text"], r["text_pair"]) for r in task.examples("test", env) if r["label"] == "yes"}
    assert {(t.head, t.tail) for t in test} == positives
    run = prepare(build_spec({"model": {"name": "tiny"}, "task": {"name": "hpo-isa"}, "strategy": {"name": "kimera"},
                              "sources": [{"name": "hpo", "include": ["isa"]}], "cache_dir": str(tmp_path)}))
    assert run.holdout.splits == ("dev", "test") and run.holdout.facts >= 700
    assert prepare(build_spec({"model": {"name": "tiny"}, "task": {"name": "hpo-isa"}, "knowledge": {"exclude": []},
                               "cache_dir": str(tmp_path)})).holdout is None


def test_the_default_hold_out_is_dev_and_test_recorded_and_a_set_value_is_kept(tmp_path, textcls_dir, tiny_model):
    """knowledge.exclude unset: dev and test are held out (run.json's decided_by names kinject.defaults); a value
    the user sets is kept, and nothing is decided."""
    from kinject.api import build_spec, prepare

    data = {"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(textcls_dir)},
            "cache_dir": str(tmp_path)}
    spec = build_spec(data)
    assert spec.knowledge.exclude is None
    run = prepare(spec)
    assert run.spec.knowledge.exclude == ["dev", "test"]
    assert run.decided_by["exclude"] == "kinject.defaults.default_exclude"
    assert "exclude" not in run.spec.knowledge.model_fields_set
    kept = prepare(build_spec({**data, "knowledge": {"exclude": ["test"]}}))
    assert kept.spec.knowledge.exclude == ["test"] and "exclude" not in kept.decided_by


def test_a_missing_exclude_file_is_one_line_before_any_stage(tmp_path, textcls_dir, capsys, tiny_model):
    from helpers import one_line_error

    line = one_line_error(capsys, ["run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}",
                                   "--model", "tiny", "--set", f"knowledge.exclude_file={tmp_path / 'nope.tsv'}"])
    assert "knowledge.exclude_file" in line and "nope.tsv" in line


@pytest.mark.parametrize("bad", ["head only", "\thead\tx"])
def test_a_malformed_exclude_file_line_names_file_and_line(tmp_path, textcls_dir, capsys, tiny_model, bad):
    from helpers import one_line_error

    facts = tmp_path / "held.tsv"
    facts.write_text(f"a\tb\tc\n{bad}\n")
    line = one_line_error(capsys, ["run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}",
                                   "--model", "tiny", "--set", f"knowledge.exclude_file={facts}"])
    assert f"{facts}:2" in line


def test_the_default_hold_out_is_announced_in_every_entry_point(tmp_path, tiny_model, capsys, caplog):
    """The hold-out decided for the user is said where the user reads: `kinject run`'s console, and the ``kinject``
    log of a run from Python (a grid cell's log too: all take prepare_runs); a hold-out the user set is not."""
    import logging

    from helpers import run_kinject

    args = ("kimera", "--task", "hpo-isa", "--model", "tiny", "--dry-run", "-o", str(tmp_path / "run"),
            "--set", "choose=false")
    assert run_kinject("run", *args) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("knowledge.exclude=")]
    assert len(said) == 1 and said[0].startswith("knowledge.exclude=[dev, test]: ") and " triples) of hpo-isa's " \
        "dev/test items held out of every knowledge source (the default; " in said[0], said
    assert run_kinject("run", *args, "--set", "knowledge.exclude=[]") == 0
    assert "knowledge.exclude=" not in capsys.readouterr().out
    with caplog.at_level(logging.INFO, logger="kinject"):
        from kinject.api import build_spec, prepare_runs

        prepare_runs(build_spec({"strategy": {"name": "kimera"}, "task": {"name": "hpo-isa"},
                                 "model": {"name": "tiny"}, "choose": False}))
    assert any(r.getMessage().startswith("knowledge.exclude=[dev, test]: ") for r in caplog.records)
