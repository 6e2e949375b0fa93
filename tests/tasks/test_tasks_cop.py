"""COP tasks: MIMIC-III tables -> admission notes, the published CSV reader, AUROC scoring, bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from kinject.errors import DataError
from kinject.interfaces import Environment
from kinject.registry import registry
from kinject.tasks import prepare_cop

NOTE = """Admission Date: [**2101-1-1**]
Chief Complaint:
chest pain
History of Present Illness:
65 yo man with pain since {n} days.
Past Medical History:
hypertension
Brief Hospital Course:
treated with drug X and died
Medications on Admission:
aspirin
Allergies:
Penicillins
Physical Exam:
BP 120/80
Discharge Diagnosis:
MI
"""


def _write(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def write_mimic(folder: Path, n: int = 12) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    notes, admissions, diagnoses, procedures = [], [], [], []
    for i in range(n):
        hadm = str(100 + i)
        notes.append([i, i, hadm, "2101-01-01", "", "", "Discharge summary", "Report", "", "", NOTE.format(n=i)])
        notes.append([1000 + i, i, hadm, "2101-01-01", "", "", "Discharge summary", "Addendum", "", "", "Chief "
                      "Complaint: addendum text"])
        notes.append([2000 + i, i, hadm, "2101-01-01", "", "", "Radiology", "CT", "", "", "Chief Complaint: x"])
        days = [1, 5, 10, 20][i % 4]
        admissions.append([i, i, hadm, "2101-01-01 08:00:00", f"2101-01-{1 + days:02d} 09:00:00", str(i % 2)])
        diagnoses.append([i, i, hadm, 1, "4280"])
        diagnoses.append([i, i, hadm, 2, "E8790" if i % 2 else "V4581"])
        procedures.append([i, i, hadm, 1, "3893"])
    _write(folder / "NOTEEVENTS.csv", ["ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME",
                                       "CATEGORY", "DESCRIPTION", "CGID", "ISERROR", "TEXT"], notes)
    _write(folder / "ADMISSIONS.csv", ["ROW_ID", "SUBJECT_ID", "HADM_ID", "ADMITTIME", "DISCHTIME",
                                       "HOSPITAL_EXPIRE_FLAG"], admissions)
    _write(folder / "DIAGNOSES_ICD.csv", ["ROW_ID", "SUBJECT_ID", "HADM_ID", "SEQ_NUM", "ICD9_CODE"], diagnoses)
    _write(folder / "PROCEDURES_ICD.csv", ["ROW_ID", "SUBJECT_ID", "HADM_ID", "SEQ_NUM", "ICD9_CODE"], procedures)
    return folder


@pytest.fixture
def cop_dir(tmp_path) -> Path:
    counts = prepare_cop.prepare(tmp_path / "data", out=tmp_path / "data" / "cop",
                                 mimic_dir=write_mimic(tmp_path / "mimic"))
    assert sum(v for k, v in counts.items() if k.startswith("mp/")) == 12
    return tmp_path / "data"


def test_admission_sections_keep_only_admission_time_information():
    text = prepare_cop.admission_sections(NOTE.format(n=3))
    assert text.startswith("CHIEF COMPLAINT: chest pain")
    for kept in ("PRESENT ILLNESS: 65 yo man with pain since 3 days.", "MEDICAL HISTORY: hypertension",
                 "ADMISSION MEDICATIONS: aspirin", "ALLERGIES: Penicillins", "PHYSICAL EXAM: BP 120/80"):
        assert kept in text
    assert "died" not in text and "Discharge Diagnosis" not in text and "MI" not in text.split()


def test_prepare_writes_labels_from_the_tables(cop_dir):
    rows = {}
    for task in ("mp", "los", "dia", "pro"):
        for split in ("train", "dev", "test"):
            with open(cop_dir / "cop" / task / f"{split}.csv", encoding="utf-8", newline="") as handle:
                for row in csv.DictReader(handle):
                    rows.setdefault(task, {})[row["id"]] = row
    assert len(rows["mp"]) == 12  # addenda and radiology notes are not admissions of their own
    assert rows["mp"]["101"]["hospital_expire_flag"] == "1" and rows["mp"]["100"]["hospital_expire_flag"] == "0"
    assert [rows["los"][str(100 + i)]["los_label"] for i in range(4)] == ["0", "1", "2", "3"]
    assert rows["dia"]["101"]["short_codes"] == "428,E879" and rows["dia"]["100"]["short_codes"] == "428,V45"
    assert rows["pro"]["100"]["short_codes"] == "389"
    assert "addendum" not in rows["mp"]["100"]["text"]


def test_tasks_read_and_score_auroc(cop_dir, tmp_path):
    env = Environment(data_dir=cop_dir, cache_dir=tmp_path / "cache")
    mp = registry("tasks").get("cop-mp")()
    mp.check(env)
    assert mp.head(env).num_labels == 2 and mp.primary_metric() == "auroc_macro"
    examples = mp.examples("train", env) + mp.examples("dev", env) + mp.examples("test", env)
    truth = np.array([int(ex["label"]) for ex in examples])
    perfect = np.stack([-truth, truth], axis=1).astype(float)
    assert mp.score("test", examples, [], perfect, env)["auroc_macro"] == pytest.approx(1.0)
    assert mp.score("test", examples, [], -perfect, env)["auroc_macro"] == pytest.approx(0.0)
    dia = registry("tasks").get("cop-dia")()
    assert dia.labels(env) == ["428", "E879", "V45"] and dia.head(env).problem_type == "multi_label_classification"
    ex = dia.examples("train", env)
    scores = np.array([[5.0, 5.0 if "E879" in e["label"] else -5.0, -5.0 if "E879" in e["label"] else 5.0]
                       for e in ex])
    assert dia.score("train", ex, [], scores, env)["auroc_macro"] == pytest.approx(1.0)  # 428 is always on: skipped


@pytest.mark.parametrize("content,message", [
    (b"id,text,hospital_expire_flag\n1,note,0\n2,note\n", ":3: expected 3 columns, found 2"),
    (b"id,text,hospital_expire_flag\n1,note,0\n2,note,yes\n", ":3: unknown label 'yes'"),
    (b"", ": empty file"),
    (b"id,text,hospital_expire_flag\n1,note,0\n2,n\xffote,1\n", ":3: invalid UTF-8"),
])
def test_bad_csv_names_file_and_line(tmp_path, content, message):
    folder = tmp_path / "mp"
    folder.mkdir()
    (folder / "train.csv").write_bytes(content)
    task = registry("tasks").get("cop-mp")(path=folder)
    with pytest.raises(DataError) as err:
        task.examples("train", Environment(data_dir=tmp_path, cache_dir=tmp_path))
    assert str(folder / "train.csv") + message in str(err.value)


def test_bad_mimic_table_names_file_and_line(tmp_path):
    mimic = write_mimic(tmp_path / "mimic", n=2)
    path = mimic / "ADMISSIONS.csv"
    path.write_text(path.read_text() + "9,9,109,2101-01-01,2101-01-02\n")
    with pytest.raises(DataError, match=r"ADMISSIONS.csv:4: expected 6 columns"):
        prepare_cop.prepare(tmp_path, out=tmp_path / "out", mimic_dir=mimic)
    assert not (tmp_path / "out").exists()  # nothing half-written
