"""The knowledge library's public MLM builders (`kinject.knowledge.mlm`): their own checks, the texts file
forms, the training-spec derivation, and a third party's "verbalise KG triples -> continued MLM -> fine-tune"
strategy written with kinject.api and the knowledge and training libraries only."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from helpers import fake_distribution, run_kinject as kinject
from helpers import write_kg

KG_MLM = '''
    """Verbalise the run's triples ("head relation tail."), continue MLM on them, then fine-tune on the task."""
    import json

    from kinject.api import Stage, StageConfig, SourceRef, Strategy, is_main_process
    from kinject.knowledge.default import triples_source
    from kinject.knowledge.mlm import mlm_stage, pack_stage
    from kinject.training import evaluate_stage, finetune_stage


    class VerbaliseConfig(StageConfig):
        source: SourceRef


    def verbalise_body(cfg, ctx):
        if not is_main_process():
            return
        with open(ctx.out / "texts.jsonl", "w", encoding="utf-8") as handle:
            for t in cfg.source.build().iter_triples(cfg.source.environment(ctx)):
                handle.write(json.dumps({"text": f"{t.head} {t.relation} {t.tail}."}) + "\\n")


    class KgMlm(Strategy):
        """Triples -> texts -> continued MLM -> fine-tune."""

        consumes = frozenset({"triples"})

        def validate(self, run):
            super().validate(run)
            return triples_source(run, 500)

        def stages(self, run):
            texts = Stage(name="kg-texts", body=verbalise_body, config=VerbaliseConfig(source=run.resolved))
            pack = pack_stage(run, "kg-pack", texts_stage="kg-texts")
            head = mlm_stage(run, "kg-head", pack_stage=pack, mode="head", steps=4, learning_rate=1e-3, batch_size=8)
            mlm = mlm_stage(run, "kg-mlm", pack_stage=pack, start_stage=head, steps=6, learning_rate=1e-3,
                            batch_size=8)
            return [texts, pack, head, mlm, finetune_stage(run, "kg-finetune", init_from="kg-mlm"),
                    evaluate_stage(run, "kg-finetune")]
    '''


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    root = fake_distribution(tmp_path / "site", "kinject-kgmlm", "[kinject.strategies]\nkg_mlm = kg_mlm:KgMlm\n",
                             {"kg_mlm": KG_MLM})
    monkeypatch.syspath_prepend(str(root))
    from kinject.api import registry

    registry("strategies").refresh()  # finds kg_mlm
    yield root
    registry("strategies").refresh()


@pytest.mark.slow
def test_a_third_party_strategy_reuses_packing_and_continued_mlm(third_party, tmp_path, textcls_dir, tiny_model):
    tree = ast.parse((third_party / "kg_mlm.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {m for m in imported if m.startswith("kinject")} == {"kinject.api", "kinject.knowledge.default",
                                                                "kinject.knowledge.mlm",
                                                                "kinject.training"}
    kg = write_kg(tmp_path / "kg.tsv")
    out = tmp_path / "run"
    assert kinject("run", "kg_mlm", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--set", "model.max_length=32", "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]',
                   "--set", "training.epochs=1", "--cache-dir", str(tmp_path / "cache"), "-o", str(out)) == 0
    assert {"dev", "test"} <= set(json.loads((out / "metrics.json").read_text()))
    stages = {p.name for p in (tmp_path / "cache" / "stages").iterdir()}
    pack = json.loads(next((tmp_path / "cache" / "stages" / "kg-pack").glob("*/pack.json")).read_text())
    assert pack["documents"] == 121 and pack["max_length"] == 32  # every triple, one text each
    train = json.loads(next((tmp_path / "cache" / "stages" / "kg-mlm").glob("*/train.json")).read_text())
    assert train["global_step"] == 6 and {"kg-texts", "kg-head", "kg-finetune", "evaluate"} <= stages


def run_context(tmp_path, textcls_dir, **training):
    from kinject.api import build_spec, prepare

    return prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls",
                               "path": str(textcls_dir)}, "strategy": {"name": "finetune"},
                               "training": {"epochs": 1, **training}, "cache_dir": str(tmp_path / "cache")}))


def test_the_builders_check_their_settings(tmp_path, textcls_dir, tiny_model):
    from kinject.api import SpecError
    from kinject.knowledge.mlm import MaskingConfig, mlm_stage, pack_stage

    run = run_context(tmp_path, textcls_dir)
    with pytest.raises(SpecError, match="texts_file 'texts.csv' must end in one of"):
        pack_stage(run, "p", texts_stage="t", texts_file="texts.csv")
    pack = pack_stage(run, "p", texts_stage="t")
    assert pack.inputs == ("t",) and pack.config.texts_file == "texts.jsonl" and pack.config.max_length == 32
    budget = dict(steps=5, learning_rate=1e-3, batch_size=4)
    with pytest.raises(SpecError, match="m: model 'tiny' ships no MLM head .* start_stage"):  # tiny ships none
        mlm_stage(run, "m", pack, **budget)
    head = mlm_stage(run, "h", pack, mode="head", **budget)
    mlm = mlm_stage(run, "m", pack, start_stage=head, produces_model=True, **budget)
    assert mlm.inputs == ("p", "h") and mlm.config.start_stage == "h" and mlm.produces_model
    assert mlm_stage(run, "m", pack, allow_random_head=True, **budget).inputs == ("p",)
    long = pack_stage(run, "p", texts_stage="t", max_length=1024)
    with pytest.raises(SpecError, match="m: max_length 1024 .* beyond the 512 positions"):
        mlm_stage(run, "m", long, start_stage=head, **budget)
    assert mlm_stage(run, "m", long, mode="scratch", scratch={"positions": 1024}, **budget).config.max_length == 1024
    for options, message in (({"masking": MaskingConfig(mask_replace=0.95)}, "mask_replace \\+ random_replace"),
                             ({"masking": MaskingConfig(probability=0)}, "masking.probability"),
                             ({"steps": 0}, "steps \\(0\\)"), ({"mode": "sideways"}, "mode 'sideways'"),
                             ({"mode": "scratch", "start_stage": head}, "no start_stage")):
        with pytest.raises(SpecError, match=f"^m: .*{message}"):
            mlm_stage(run, "m", pack, **{**budget, "allow_random_head": True, **options})


def test_the_mlm_training_spec_nulls_fine_tuning_only_settings(tmp_path, textcls_dir, tiny_model):
    from kinject.knowledge.mlm import mlm_training_spec

    run = run_context(tmp_path, textcls_dir, head_learning_rate=1e-2, min_steps=5, eval_steps=3)
    spec = mlm_training_spec(run.spec.training, 7, 2e-4, 4, gradient_accumulation=2, warmup_ratio=0.2)
    assert (spec.max_steps, spec.learning_rate, spec.batch_size, spec.gradient_accumulation_steps) == (7, 2e-4, 4, 2)
    assert spec.epochs == 1.0 and spec.warmup_ratio == 0.2 and spec.group_by_length  # an order the dose reconstructs
    by_epochs = mlm_training_spec(run.spec.training, 7, 2e-4, 4, epochs=2.5)  # knowledge.epochs instead of steps
    assert (by_epochs.epochs, by_epochs.max_steps) == (2.5, -1)
    assert spec.head_learning_rate is None and spec.min_steps is None and spec.eval_steps is None
    assert spec.weight_decay == run.spec.training.weight_decay and spec.save_steps == run.spec.training.save_steps


@pytest.mark.parametrize("name, content", [
    ("texts.jsonl", '{"text": "first text"}\n\n{"text": "second one", "id": 2}\n'),
    ("texts.txt", "first text\n\nsecond one\n"),
])
def test_texts_files(tmp_path, name, content):
    from kinject.api import DataError
    from kinject.knowledge.packing import read_texts

    path = tmp_path / name
    path.write_text(content)
    assert list(read_texts(path)) == ["first text", "second one"] and list(read_texts(path, 1)) == ["first text"]
    if name.endswith(".jsonl"):
        path.write_text('{"text": "fine"}\n{"txt": "no text"}\n')
        with pytest.raises(DataError, match="texts.jsonl:2: missing field 'text'"):
            list(read_texts(path))


def test_texts_file_arrow(tmp_path):
    from datasets import Features, Value
    from datasets.arrow_writer import ArrowWriter

    from kinject.knowledge.packing import read_texts

    writer = ArrowWriter(features=Features({"text": Value("string")}), path=str(tmp_path / "t.arrow"))
    for text in ("a", "b", "c"):
        writer.write({"text": text})
    writer.finalize()
    writer.close()
    assert list(read_texts(Path(tmp_path / "t.arrow"))) == ["a", "b", "c"]
