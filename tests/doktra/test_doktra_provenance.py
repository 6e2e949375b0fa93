"""A DoKTra teacher that is a kinject run declares the held-out facts it saw (run.json): one trained with
``knowledge.exclude: []`` is refused in one line, or labelled memorisation when the run holds nothing out (#41)."""

from __future__ import annotations

import pytest

from helpers import fake_kinject_run, refusal_line
from kinject.api import SpecError


def _spec(teacher, **knowledge):
    from kinject.api import build_spec

    return build_spec({"model": {"name": "tiny"}, "task": {"name": "hpo-isa"},
                       "strategy": {"name": "doktra", "teacher": str(teacher)}, "knowledge": knowledge,
                       "hooks": {"knowledge-probe": {"enabled": False}}})


def test_doktra_teacher_that_kept_the_held_out_facts_is_refused(tmp_path, tiny_model, capsys):
    teacher = fake_kinject_run(tmp_path / "teacher", tiny_model, exclude=[])
    line = refusal_line(capsys, ["run", "doktra", "--task", "hpo-isa", "--model", "tiny", "--set",
                                   f"strategy.teacher={teacher}", "--dry-run", "-o", str(tmp_path / "out")])
    assert "strategy.teacher" in line and str(teacher) in line
    assert "saw 749 of this run's 749 held-out facts" in line and "knowledge.exclude=[]" in line


def test_doktra_teacher_memorisation_is_labelled_and_a_held_out_teacher_passes(tmp_path, tiny_model):
    from kinject.api import prepare
    from kinject.engine import knowledge_record

    kept = fake_kinject_run(tmp_path / "kept", tiny_model, exclude=[])
    run = prepare(_spec(kept, exclude=[]))
    [entry] = knowledge_record(run)["inputs"]
    assert entry["input"] == "strategy.teacher" and entry["memorisation"] and entry["saw"] == 749
    held = fake_kinject_run(tmp_path / "held", tiny_model, exclude=["dev", "test"])
    [entry] = prepare(_spec(held)).inputs
    assert entry["saw"] == 0 and not entry["memorisation"]
    other = fake_kinject_run(tmp_path / "other", tiny_model, exclude=["dev", "test"],
                             task={"name": "hpo-isa", "split_seed": 1, "train_pairs": 2000}, dose=False)
    with pytest.raises(SpecError, match="strategy.teacher.*labelled items of its task's train split"):
        prepare(_spec(other))  # trained on another split of the same graph: its pairs state held-out facts
