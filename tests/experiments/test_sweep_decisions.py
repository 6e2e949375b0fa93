"""`kinject sweep`'s folds follow the automatic choice's rules (kinject.training): a split too small for
the folds scores dev instead, in one announced line; fold trials keep their last weights, as the choice's do."""

from __future__ import annotations

import json


def test_a_rare_label_scores_dev_instead_of_folds_announced(tmp_path, tiny_model):
    from kinject import api
    from kinject.experiments import study

    folder = tmp_path / "rare"
    folder.mkdir()
    for split, labels in (("train", ["a", "b"] * 20 + ["rare"]), ("dev", ["a", "b", "rare"]),
                          ("test", ["a", "b", "rare"])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": f"t {i} {label}", "label": label}) + "\n"
                                                       for i, label in enumerate(labels)))
    run = api.prepare(api.build_spec({"task": {"name": "textcls", "path": str(folder)}, "model": {"name": "tiny"}}))
    said: list[str] = []
    assert study.choose_folds(run, None, "dev", said.append) == 0
    assert len(said) == 1 and "label 'rare' has 1 example(s), fewer than 5 folds" in said[0]
    assert "scored on the dev split instead" in said[0]


def test_fold_trials_use_the_choices_fold_settings():
    from kinject.experiments.sweep import fold_spec
    from kinject.choice import fold_run_settings

    data = fold_spec({"training": {"selection": "best", "patience": 3}}, 1, 5)
    assert data["fold"] == fold_run_settings(1, 5)["fold"] == "1/5"
    assert data["training"] == {"selection": "last", "patience": None, "eval_splits": ["dev"], "select_every": None}
