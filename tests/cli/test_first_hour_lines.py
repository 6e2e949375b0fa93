"""A run says each thing once: the knowledge dose (the section under the metrics table; the engine's line goes to the
run log only) and each system that learned nothing (beside the verdict; neither the compare stage nor the run's end
repeats it on the console). The dose records what the hold-out removed from the knowledge a stage read, with no
code in the stage: the stage runner counts it (stage.json ``held_out``) and the run's dose takes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import fake_distribution, write_kg

STRATEGY = '''
"""A baseline, a stage that reads the run's triples and records its dose, an arm, and their comparison."""
import numpy as np

from kinject.api import SourceRef, Stage, StageConfig, Strategy, fact_key
from kinject.evidence import compare_stage
from kinject.knowledge import write_dose
from kinject.training import evaluate_stage, finetune_stage


class ReadConfig(StageConfig):
    source: SourceRef


def read_body(cfg, ctx):
    triples = list(cfg.source.build().iter_triples(cfg.source.environment(ctx)))
    keys = np.asarray([fact_key(t.head, t.relation, t.tail) for t in triples], dtype=np.uint64)
    write_dose(ctx.out, unit="triples", covered=keys, seen=len(keys), rows_seen=len(keys), rows_total=len(keys),
               available=len(keys))


class Dosed(Strategy):
    """Reads triples, records a dose, compares an arm with the baseline."""

    consumes = frozenset({"triples"})

    def stages(self, run):
        return [finetune_stage(run), evaluate_stage(run, export=False),
                Stage(name="dosed-read", body=read_body, config=ReadConfig(source=run.source_refs()[0])),
                finetune_stage(run, "dosed-finetune"), evaluate_stage(run, "dosed-finetune", "dosed-evaluate"),
                compare_stage(run, "evaluate", "dosed-evaluate", name="dosed-compare", labels=("finetune", "dosed"))]
'''


@pytest.mark.slow
def test_the_dose_and_each_system_that_learned_nothing_are_said_once_and_the_dose_has_held_out(
        tmp_path, textcls_dir, tiny_model):
    root = fake_distribution(tmp_path / "site", "kinject-dosed", "[kinject.strategies]\ndosed = dosed_strategy:Dosed\n",
                             {"dosed_strategy": STRATEGY})
    kg = write_kg(tmp_path / "kg.tsv")
    rows = [line.split("\t") for line in kg.read_text().splitlines()]
    facts = tmp_path / "facts.tsv"
    facts.write_text("".join("\t".join(row) + "\n" for row in rows[:2]))
    pairs = {frozenset((row[0], row[2])) for row in rows[:2]}
    removed = sum(frozenset((row[0], row[2])) in pairs for row in rows)  # either direction, any relation
    env = dict(os.environ, COLUMNS="300", PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    ran = subprocess.run([sys.executable, "-m", "kinject", "run", "dosed", "--task", "textcls", "--model", "tiny",
                          "--set", f"task.path={textcls_dir}", "--set", "training.max_steps=2",
                          "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]',
                          "--set", f"knowledge.exclude_file={facts}", "--set", "hooks.knowledge-probe.enabled=false",
                          "-o", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    said = ran.stdout + ran.stderr
    assert said.count("knowledge dose:") == 1 and f"{removed} held out" in said, said
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["dose"]["held_out"] == removed and metrics["dose"]["seen"] == len(rows) - removed
    stages = {s["name"]: s for s in json.loads((tmp_path / "run" / "run.json").read_text())["stages"]}
    assert json.loads((Path(stages["dosed-read"]["dir"]) / "stage.json").read_text())["held_out"] == removed
    assert "held_out" not in json.loads((Path(stages["finetune"]["dir"]) / "stage.json").read_text())
    flags = metrics["comparison"]["not_learned"]
    assert any(flags.values()), flags  # the tiny model after 2 steps: something to say
    for side, label in (("baseline", "finetune"), ("other", "dosed")):
        assert said.count(f"not learned: {label}: ") == (1 if flags.get(side) else 0), said
    assert "learned nothing" not in said  # neither the compare stage's line nor the run's end warning
    log = (tmp_path / "run" / "kinject.log").read_text()
    assert "knowledge dose:" in log and "learned nothing" in log  # both kept in the run log
