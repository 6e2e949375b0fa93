"""Provenance of facts (#41): a starting model that is a kinject run declares the held-out facts it saw, and the
text filter removes the held-out statements only - the same facts the graph filter removes."""

from __future__ import annotations

from helpers import fake_kinject_run, refusal_line


def test_a_starting_model_that_is_a_run_which_kept_the_facts_is_refused(tmp_path, tiny_model, capsys):
    run = fake_kinject_run(tmp_path / "kimera" / "seed-42", tiny_model, exclude=[])  # one seed's folder
    line = refusal_line(capsys, ["run", "finetune", "--task", "hpo-isa", "--model", str(run / "model"),
                                   "--dry-run", "-o", str(tmp_path / "out")])
    assert line.startswith("error: model.name:") and "saw 749 of this run's 749 held-out facts" in line


def test_a_starting_model_run_is_recorded_clean_or_as_memorisation(tmp_path, tiny_model):
    from kinject.api import build_spec, prepare
    from kinject.engine import knowledge_record

    def run(model, **knowledge):
        return prepare(build_spec({"model": {"name": str(model)}, "task": {"name": "hpo-isa"},
                                   "knowledge": knowledge, "hooks": {"knowledge-probe": {"enabled": False}}}))

    held = fake_kinject_run(tmp_path / "held", tiny_model, exclude=["dev", "test"])
    [entry] = knowledge_record(run(held / "model"))["inputs"]
    assert entry["kind"] == "run" and entry["saw"] == 0 and entry["run"] == str(held)
    kept = fake_kinject_run(tmp_path / "kept", tiny_model, exclude=[])
    [entry] = run(kept / "model", exclude=[]).inputs
    assert entry["memorisation"] and entry["saw"] == 749
    assert run(tiny_model).inputs == []  # not a kinject run: nothing declared


def test_the_text_filter_drops_the_held_out_statement_and_keeps_the_childs_other_facts(tmp_path):
    from kinject.api import Environment, HeldOutSource
    from kinject.api import HeldOutFacts
    from kinject.knowledge import CorpusSource

    lines = ["Arachnodactyly: Abnormally long and slender fingers. Arachnodactyly is also called spider fingers. "
             "Arachnodactyly is a kind of Long fingers. Arachnodactyly is a kind of Slender finger.",
             "Focal seizure is a kind of Seizure. Focal seizure is a kind of Abnormal brain activity.",
             "Absence seizure is a kind of Seizure."]  # as benchmarks/experiments/hpo_corpus.py writes the HPO
    corpus = tmp_path / "hpo.txt"
    corpus.write_text("\n".join(lines) + "\n")
    facts = HeldOutFacts([("Arachnodactyly", "is a", "Long fingers"), ("Focal seizure", "is a", "Seizure")])
    source = HeldOutSource(CorpusSource(CorpusSource.Config(paths=[str(corpus)])), facts)
    texts = list(source.iter_texts(Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")))
    assert texts == ["Arachnodactyly: Abnormally long and slender fingers. Arachnodactyly is also called spider "
                     "fingers. Arachnodactyly is a kind of Slender finger.",  # definition, synonym, other is-a kept
                     "Focal seizure is a kind of Abnormal brain activity.",  # "focal seizure" is one name, not two
                     "Absence seizure is a kind of Seizure."]
    assert source.removed == 2 and source.kept == 3  # one statement per held-out fact
    assert not any(facts.blocks_text(text) for text in texts)
