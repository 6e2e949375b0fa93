"""The `doktra` strategy: the stage plan of every variant, keys shared with `finetune`, bad input failing before
any stage (exit 2), a given fine-tuned teacher, and end-to-end tiny runs (a teacher with another tokenizer and
width; a multi-label task; a run directory as the teacher)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import PROBE_STAGES

from doktra_helpers import build_word_teacher
from helpers import run_kinject as kinject


@pytest.fixture(scope="module")
def word_teacher(tmp_path_factory) -> Path:
    return build_word_teacher(tmp_path_factory.mktemp("word-teacher") / "model")


def spec(tmp_path, textcls_dir, teacher=None, training=None, task=None, **strategy) -> dict:
    if teacher is not None:
        strategy["teacher"] = str(teacher)
    return {"model": {"name": "tiny", "max_length": 32},
            "task": {"name": "textcls", "path": str(textcls_dir), **(task or {})},
            "strategy": {"name": "doktra", **strategy},
            "training": {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, **(training or {})},
            "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)}


def prepared(data: dict):
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    return prepare(build_spec(data))


TEACHER = ["doktra-teacher", "doktra-teacher-evaluate"]
STUDENT = ["finetune", "evaluate"]
TAIL = ["doktra-evaluate", "doktra-report", "doktra-compare"]


@pytest.mark.parametrize("variant,options,names", [
    ("doktra", {}, [*TEACHER, *STUDENT, "doktra-teacher-outputs", "doktra-distill", *TAIL]),
    ("doktra", {"teacher_cache": False}, [*TEACHER, *STUDENT, "doktra-distill", *TAIL]),
    ("kd", {}, [*TEACHER, *STUDENT, "doktra-teacher-outputs", "doktra-distill", *TAIL]),
    ("no-abd", {}, [*TEACHER, *STUDENT, "doktra-distill", *TAIL]),
    ("cp-only", {}, [*TEACHER, *STUDENT, "doktra-cp", *TAIL]),
    ("student-ft", {}, STUDENT),
])
def test_stage_plan_per_variant(tmp_path, textcls_dir, word_teacher, variant, options, names):
    run = prepared(spec(tmp_path, textcls_dir, word_teacher, variant=variant, **options))
    assert [s.name for s in run.stages] == [*names, *PROBE_STAGES]  # the knowledge probe: every run


def test_teacher_and_cp_only_student_are_built_with_the_runs_model_settings(tmp_path, textcls_dir, word_teacher):
    data = spec(tmp_path, textcls_dir, word_teacher, variant="cp-only", beta2=0.2)
    data["model"].update(pooling="mean", layers=1)
    stages = {s.name: s for s in prepared(data).stages}
    teacher, student = stages["doktra-teacher"].config, stages["doktra-cp"].config
    assert teacher.model.pooling == "mean" and teacher.model.max_length == 32 and teacher.model.layers is None
    assert teacher.beta == 0.3 and teacher.model.path == str(word_teacher.resolve())
    assert student.model.layers == 1 and student.model.pooling == "mean" and student.beta == 0.2


def test_calibrated_stages_run_the_shared_fine_tune_body_and_training_keys_hold_no_report_code(tmp_path, textcls_dir,
                                                                                                word_teacher):
    from kinject.training import FinetuneConfig, finetune_body
    from kinject.keys import plan

    for variant, finetuned, others in (("cp-only", ("doktra-teacher", "doktra-cp"), ()),
                                       ("doktra", ("doktra-teacher",), ("doktra-teacher-outputs", "doktra-distill"))):
        run = prepared(spec(tmp_path, textcls_dir, word_teacher, variant=variant))
        assert run.resolved.teacher.ref.path == str(word_teacher.resolve()) and run.resolved.teacher.as_given is False
        assert not hasattr(run.strategy, "_teacher")  # what validate resolved is handed over as run.resolved
        stages = {s.name: s for s in run.stages}
        for name in finetuned:
            assert stages[name].body is finetune_body and isinstance(stages[name].config, FinetuneConfig)
        code = {p.stage.name: set(p.code_modules) for p in plan(run)}
        for name in (*finetuned, *others, "finetune"):  # no report, plot, evidence or CLI code in a training key
            assert not {m for m in code[name] if m.endswith(".report") or ".evidence" in m or ".cli" in m}, name
        assert "kinject.plugins.doktra.report" in code["doktra-report"]


def test_variants_share_the_teacher_and_the_student_baseline_and_finetune_keys(tmp_path, textcls_dir, word_teacher):
    from kinject.keys import plan
    from kinject.plugins.finetune.strategy import FinetuneStrategy

    keys = {v: {p.stage.name: p.key for p in plan(prepared(spec(tmp_path, textcls_dir, word_teacher, variant=v)))}
            for v in ("doktra", "kd", "no-ctt")}
    for stage in ("doktra-teacher", "doktra-teacher-outputs", "finetune", "evaluate"):
        assert keys["doktra"][stage] == keys["kd"][stage], stage
    assert keys["no-ctt"]["doktra-teacher"] != keys["doktra"]["doktra-teacher"]  # beta1 = 0
    run = prepared(spec(tmp_path, textcls_dir, word_teacher))
    run.strategy = FinetuneStrategy()
    run.stages = run.strategy.stages(run)
    plain = {p.stage.name: p.key for p in plan(run)}
    assert plain["finetune"] == keys["doktra"]["finetune"] and plain["evaluate"] == keys["doktra"]["evaluate"]


def classifier_dir(base: Path, target: Path, labels: tuple[str, ...]) -> Path:
    """``base`` encoder saved as a sequence classifier with these labels (a 'fine-tuned' teacher)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(base).save_pretrained(target)
    return target


@pytest.mark.parametrize("options, message", [
    ({"teacher": "./no/such/dir"}, "strategy.teacher: teacher model './no/such/dir': no such directory"),
    ({"teacher": "LABELS"}, "strategy.teacher: the fine-tuned teacher"),
    ({"teacher": "tiny", "beta1": 1.5}, "strategy.beta1: Input should be less than or equal to 1"),
    ({"teacher": "tiny", "gamma": 1.2}, "strategy.gamma: Input should be less than or equal to 1"),
    ({"teacher": "tiny", "gamma": 0.05}, "strategy.gamma: int(gamma x steps) = int(0.05 x 6) = 0"),
    ({"variant": "kd"}, "strategy.teacher: variant 'kd' distils from a teacher"),
    ({"teacher": "tiny", "analysis_split": "nope"}, "strategy.analysis_split"),
    ({"teacher": "tiny", "train_teacher": "never"}, "is not a fine-tuned sequence classifier"),
])
def test_bad_input_exits_2_before_any_stage(tmp_path, textcls_dir, word_teacher, tiny_model, capsys, options, message):
    if options.get("teacher") == "LABELS":
        options["teacher"] = str(classifier_dir(word_teacher, tmp_path / "other", ("yes", "no", "maybe")))
    cache, out = tmp_path / "cache", tmp_path / "out"
    sets = [a for k, v in options.items() for a in ("--set", f"strategy.{k}={v}")]
    code = kinject("run", "doktra", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--set", "training.epochs=2", "--cache-dir", str(cache), "-o", str(out), *sets)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (cache / "stages").exists() and not out.exists()


def test_a_given_fine_tuned_teacher_is_used_as_it_is_with_its_rows_in_task_order(tmp_path, textcls_dir, word_teacher):
    import torch
    from transformers import AutoModelForSequenceClassification

    from kinject.engine import execute

    from kinject.keys import plan

    given = classifier_dir(word_teacher, tmp_path / "given", ("other", "bio"))  # the task's order is bio, other
    run = prepared(spec(tmp_path, textcls_dir, given))
    run.stages = run.stages[:1]
    assert run.stages[0].body.__name__ == "import_body"
    execute(run, tmp_path / "run")
    imported = AutoModelForSequenceClassification.from_pretrained(plan(run)[0].folder / "model")
    original = AutoModelForSequenceClassification.from_pretrained(given)
    assert imported.config.id2label == {0: "bio", 1: "other"}
    ids = torch.tensor([[2, 7, 8, 3]])
    with torch.no_grad():
        torch.testing.assert_close(imported(input_ids=ids).logits, original(input_ids=ids).logits[:, [1, 0]])
    with pytest.raises(Exception, match="strategy.variant: no-ctt"):
        prepared(spec(tmp_path, textcls_dir, given, variant="no-ctt"))


def test_model_source_resolves_a_run_directory_to_its_model(tmp_path, tiny_model, cache_dir):
    from kinject.interfaces import Environment
    from kinject.knowledge.sources.model import ModelSource

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "model" / "config.json").write_text("{}")
    env = Environment(data_dir=tmp_path, cache_dir=cache_dir)
    source = ModelSource(model=str(run))
    assert source.model_path(env) == str((run / "model").resolve())
    assert ModelSource(model="tiny").fingerprint(env).startswith("tiny:")


@pytest.mark.parametrize("projection,width", [("auto", 32), pytest.param("learned", 48, marks=pytest.mark.slow)])
def test_end_to_end_with_a_teacher_of_another_tokenizer_and_width(tmp_path, textcls_dir, word_teacher, projection,
                                                                   width):
    from safetensors.torch import load_file
    from transformers import AutoModel

    from kinject.engine import execute

    metrics = execute(prepared(spec(tmp_path, textcls_dir, word_teacher, beta1=0.3, ece_bins=10,
                                    projection=projection)), tmp_path / "run")
    for split in ("dev", "test"):
        for key in ("accuracy", "ece", "teacher/accuracy", "teacher/ece", "student_ft/ece", "retained/student"):
            assert key in metrics[split], (split, key)
        assert 0 <= metrics[split]["teacher/ece"] <= 1
    l_at = metrics["l_at"]
    assert l_at["width"] == width and 0 <= l_at["after"] <= width and 0 <= l_at["before"] <= width
    assert l_at["examples"] == 16
    assert metrics["train"]["switch_step"] == 10 and metrics["train"]["batches"] == {"distill": 10, "refine": 2}
    assert metrics["doktra"]["ece_bins"] == 10 and metrics["comparison"]["other_name"] == "doktra"
    run = tmp_path / "run"
    assert (run / "plots" / "reliability-test.png").stat().st_size > 1000
    assert set(json.loads((run / "calibration.json").read_text())["test"]) == {"student", "student_ft", "teacher"}
    assert AutoModel.from_pretrained(run / "model").config.hidden_size == 32
    stages = {s["name"]: Path(s["dir"]) for s in json.loads((run / "run.json").read_text())["stages"]}
    saved = load_file(str(stages["doktra-distill"] / "projection.safetensors"))  # 48 -> 32 frozen, or 32 -> 48
    assert saved["weight"].shape == ((32, 48) if projection == "auto" else (48, 32))
    assert not any(k.startswith("doktra_projection") for k in load_file(str(run / "model" / "model.safetensors")))
    assert json.loads((stages["doktra-teacher"] / "train.json").read_text())["beta"] == 0.3


@pytest.mark.slow
def test_multi_label_kd_run_with_a_run_directory_as_teacher(tmp_path, word_teacher):
    from kinject.engine import execute

    data = tmp_path / "ml"
    data.mkdir()
    rows = [("gene expression increased in tumor cells", ["bio", "cell"]), ("the drug dose reduced symptoms", ["bio"]),
            ("a cat sat on the mat", []), ("trains run late on sunday", ["travel"])]
    for split, n in (("train", 16), ("dev", 8), ("test", 8)):
        (data / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n"
                                                     for t, y in (rows * 4)[:n]))
    task = {"multi_label": True}
    teacher_run = tmp_path / "teacher-run"
    execute(prepared(spec(tmp_path, data, task=task, variant="student-ft")), teacher_run)  # a fine-tuned run dir
    metrics = execute(prepared(spec(tmp_path, data, teacher_run, task=task, variant="kd", kd_temperature=2.0)),
                      tmp_path / "run")
    assert metrics["test"]["f1_micro"] >= 0 and 0 <= metrics["test"]["ece"] <= 1
    assert metrics["test"]["teacher/f1_micro"] == pytest.approx(
        json.loads((teacher_run / "metrics.json").read_text())["test"]["f1_micro"])
    assert metrics["train"]["objective"] == "kd" and metrics["l_at"]["before"] >= 0


@pytest.mark.slow
def test_the_margin_can_be_in_units_of_the_teacher_s_activations(tmp_path, textcls_dir, word_teacher):
    from kinject.engine import execute

    run = prepared(spec(tmp_path, textcls_dir, word_teacher, margin=0.5, margin_unit="teacher"))
    execute(run, tmp_path / "run")
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    distill = Path(next(s["dir"] for s in info["stages"] if s["name"] == "doktra-distill"))
    margin = json.loads((distill / "train.json").read_text())["margin"]
    assert margin["unit"] == "teacher" and margin["teacher_mean_abs_cls"] > 0
    assert margin["effective"] == pytest.approx(0.5 * margin["teacher_mean_abs_cls"])
