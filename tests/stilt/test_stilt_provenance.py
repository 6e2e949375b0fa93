"""STILT with an intermediate task built from the target's graph (#41): the intermediate's examples that state the
target's held-out facts are filtered out (announced, recorded in run.json); with ``knowledge.exclude: []`` they are
kept and the input is labelled memorisation."""

from __future__ import annotations

import dataclasses

INTERMEDIATE = {"name": "hpo-isa", "split_seed": 1, "train_pairs": 2000}


def _run(**knowledge):
    from kinject.api import build_spec, prepare

    return prepare(build_spec({"model": {"name": "tiny"}, "task": {"name": "hpo-isa"}, "knowledge": knowledge,
                               "strategy": {"name": "stilt", "intermediate": [INTERMEDIATE]},
                               "hooks": {"knowledge-probe": {"enabled": False}}}))


def test_stilt_intermediate_from_the_same_graph_is_filtered(caplog):
    from kinject.engine import knowledge_record
    from kinject.knowledge.provenance import example_states

    with caplog.at_level("INFO", logger="kinject"):
        run = _run()
    [entry] = knowledge_record(run)["inputs"]
    assert entry["input"] == "strategy.intermediate.0" and entry["filtered"] and not entry["memorisation"]
    assert entry["saw"] > 20 and entry["held_out"] == 749  # the audit: 32 facts in the 2,000 training pairs alone
    assert any("strategy.intermediate.0" in r.message and "filtered out" in r.message for r in caplog.records)
    stage = next(s for s in run.stages if s.name.startswith("stilt-intermediate"))
    assert stage.name == "stilt-intermediate-1-hpo-isa" and stage.config.task.inputs is not None
    facts, env = run.holdout.held_out(), dataclasses.replace(run.env, limit=None)
    raw, filtered = stage.config.task.raw(), stage.config.task.build()
    for split in ("train", "dev"):
        before, after = raw.examples(split, env), filtered.examples(split, env)
        stated = [ex for ex in before if example_states(facts, ex) is not None]
        assert stated and len(after) == len(before) - len(stated)  # exactly those, nothing else
        assert not any(example_states(facts, ex) for ex in after)
    # the target's own stages are untouched
    assert next(s for s in run.stages if s.name == "stilt-finetune").config.task.inputs is None


def test_stilt_intermediate_under_memorisation_is_kept_and_labelled():
    run = _run(exclude=[])
    [entry] = run.inputs
    assert entry["memorisation"] and not entry["filtered"] and entry["saw"] > 20
    assert next(s for s in run.stages if s.name.startswith("stilt-intermediate")).config.task.inputs is None  # nothing held out: nothing filtered
