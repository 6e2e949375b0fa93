"""docs/tasks.md's section on a user's own data: every shell block in it runs as written, offline, in an empty folder
(the worked example trains the tiny model; the TSV example is a dry run), and what the text promises holds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def own_data_section() -> str:
    text = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    return text.split("## Your own data", 1)[1].split("\n## ", 1)[0]


def shell_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", own_data_section(), re.S)


def test_the_page_has_a_title_and_the_section_documents_every_setting_of_the_task():
    text = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    assert text.startswith("# Tasks\n") and len(shell_blocks()) == 2
    from kinject.tasks.textcls import TextClsConfig

    section = own_data_section()
    for field in TextClsConfig.model_fields:
        assert f"task.{field}" in section, field


@pytest.mark.slow
def test_every_command_of_the_section_runs_offline(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", KINJECT_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="300",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    outputs = []
    for block in shell_blocks():
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=900)
        assert ran.returncode == 0, ran.stderr[-3000:]
        outputs.append(ran.stdout + ran.stderr)
    metrics = json.loads((tmp_path / "runs" / "notes" / "metrics.json").read_text())
    assert set(metrics["test"]) >= {"accuracy", "f1_macro"}
    records = [json.loads(line) for line in (tmp_path / "runs/notes/predictions/test.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == ["t1", "t2", "t3"]  # the ids the files give
    assert "protocol quick: training.max_steps=30, training.selection=last" in outputs[0]
    assert "the dev split has 1 group (its 2 examples, one unit per group)" in outputs[1]  # the groups were read


def test_a_grouped_split_is_limited_by_whole_groups_and_its_records_carry_the_group(tmp_path):
    from kinject.api import Environment
    from kinject.tasks.textcls import TextClassificationTask

    folder = tmp_path / "pairs"
    folder.mkdir()
    rows = "".join(f"p{i // 3}\tsymptom {i}\tfinding {i}\t{'yes' if i % 2 else 'no'}\n" for i in range(9))
    for split in ("train", "dev", "test"):
        (folder / f"{split}.tsv").write_text("patient\tsymptom\tfinding\tlabel\n" + rows)
    task = TextClassificationTask(path=folder, text_field="symptom", text_pair_field="finding", group_field="patient")
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path, limit=2)
    examples = task.examples("dev", env)
    assert len(examples) == 6 and {ex["group"] for ex in examples} == {"p0", "p1"}  # 2 whole groups of 3
    assert task.units(examples) == (2, "group")
    assert examples[0]["text_pair"] == "finding 0"
    ungrouped = TextClassificationTask(path=folder, text_field="symptom")
    assert len(ungrouped.examples("dev", env)) == 2 and "group" not in ungrouped.examples("dev", env)[0]
