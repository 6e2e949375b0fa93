"""The `context` strategy: knowledge in context (the ceiling an injection method is read against)."""

from __future__ import annotations

import json

import pytest

from helpers import one_line_error
from helpers import run_kinject as kinject

ISA = "sources=[{name: hpo, include: [isa]}]"


def test_linking_finds_names_and_synonyms_longest_first_and_verbalises_the_facts(tmp_path):
    from kinject.api import Environment, Triple
    from kinject.plugins.context.linking import EntityIndex, context_for

    class Graph:
        def iter_triples(self, env):
            yield from (Triple("Seizure", "is a", "Abnormality of the nervous system"),
                        Triple("Focal seizure", "is a", "Seizure"), Triple("Fever", "is a", "Abnormality of temperature"))

        def entity_texts(self, env):
            yield "Seizure", ("Epileptic fit",), "A sudden event."
            yield "Unlinked", (), "never used"

    index = EntityIndex(Graph(), Environment(data_dir=tmp_path, cache_dir=tmp_path))
    assert index.link("a focal seizure with fever") == ["Focal seizure", "Fever"]  # the longer name wins
    assert index.link("an EPILEPTIC FIT.") == ["Seizure"]
    options = {"give": "both", "max_entities": 4, "max_facts": 6, "max_words": 96}
    sentences, facts = context_for(index, ["epileptic fit"], options)
    assert sentences[0] == "Seizure: A sudden event." and "Seizure is a Abnormality of the nervous system." in sentences
    assert ("Focal seizure", "is a", "Seizure") in facts  # the facts it is the tail of come after its own
    short, _ = context_for(index, ["epileptic fit"], {**options, "max_words": 6})
    assert sum(len(s.split()) for s in short) <= 6


def test_context_runs_hands_the_facts_to_the_model_and_records_them_per_example(tmp_path, tiny_model):
    out = tmp_path / "ctx"
    assert kinject("run", "context", "--task", "hpo-isa", "--model", "tiny", "--quick", "--set", ISA,
                   "--set", "knowledge.exclude=[]", "--set", "hooks.knowledge-probe.enabled=false", "-o", str(out)) == 0
    records = [json.loads(line) for line in (out / "predictions" / "test.jsonl").read_text().splitlines()]
    assert records and all("context" in r for r in records)
    # with nothing held out the graph holds the answer: a positive pair's context states "child is a parent"
    examples = {f"{r['id']}" for r in records}
    answered = [r for r in records if r["gold"] == "yes" and any(" is a " in s for s in r["context"])]
    assert examples and answered
    shown = json.loads((out / "context.json").read_text())
    assert shown["test"]["with_context"] == shown["test"]["inputs"] and shown["train"]["facts_per_input"] > 1
    dose = json.loads((out / "metrics.json").read_text())["dose"]
    assert dose["unit"] == "facts in context" and dose["distinct"] > 0
    comparison = json.loads((out / "metrics.json").read_text())["comparison"]
    assert comparison["other_name"] == "context" and comparison["baseline_name"] == "finetune"


@pytest.mark.slow
def test_the_held_out_answers_never_reach_the_context(tmp_path, tiny_model):
    from kinject.api import words

    out = tmp_path / "ctx"
    assert kinject("run", "context", "--task", "hpo-isa", "--model", "tiny", "--quick", "--set", ISA,
                   "--set", "hooks.knowledge-probe.enabled=false", "-o", str(out)) == 0  # default: dev and test facts held out
    held = 0
    from kinject.api import Environment, registry

    task = registry("tasks").get("hpo-isa")()
    names = {r["id"]: (r["text"], r["text_pair"]) for r in task.examples("test", Environment(tmp_path, tmp_path))}
    for line in (out / "predictions" / "test.jsonl").read_text().splitlines():
        record = json.loads(line)
        child, parent = names[record["id"]]
        if record["gold"] == "yes":
            held += 1
            stated = f"{' '.join(words(child))} is a {' '.join(words(parent))}"
            assert not any(" ".join(words(s)) == stated for s in record["context"]), record["id"]
    assert held


def test_context_refuses_token_tasks_with_one_line(capsys, tiny_model, data_dir):
    line = one_line_error(capsys, ["run", "context", "--task", "ncbi-disease", "--model", "tiny",
                                   "--set", f"data_dir={data_dir}"])
    assert "supports sequence classification" in line and "token tagging" in line and "ncbi-disease" in line
