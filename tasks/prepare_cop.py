"""MIMIC-III -> clinical outcome prediction admission notes (van Aken et al. 2021; KIMERA 3.3).

Reads NOTEEVENTS, ADMISSIONS, DIAGNOSES_ICD and PROCEDURES_ICD (``.csv`` or ``.csv.gz``, MIMIC-III
column names). From each admission's discharge summary (CATEGORY "Discharge summary", DESCRIPTION
"Report") only the sections known at admission are kept: chief complaint, present illness, medical
history, admission medications, allergies, physical exam, family history, social history. Writes
``<out>/{mp,los,dia,pro}/{train,dev,test}.csv`` in the published format (``id,text,<label>``; codes
comma-separated). Splits: seeded 70/10/20 by patient (SUBJECT_ID), so a patient is in one split only.
"""

from __future__ import annotations

import csv
import hashlib
import re
from datetime import datetime
from pathlib import Path

from kinject.api import DataError, DataMissingError, atomic_file
from kinject.tasks.readers import read_csv_columns

SECTIONS = {  # kept section -> header keywords (lower case, matched as a prefix of the header)
    "CHIEF COMPLAINT": ("chief complaint",),
    "PRESENT ILLNESS": ("history of present illness", "present illness", "hpi"),
    "MEDICAL HISTORY": ("past medical history", "medical history", "pmh"),
    "ADMISSION MEDICATIONS": ("medications on admission", "admission medications", "meds on admission"),
    "ALLERGIES": ("allergies",),
    "PHYSICAL EXAM": ("physical exam", "admission exam", "physical examination"),
    "FAMILY HISTORY": ("family history",),
    "SOCIAL HISTORY": ("social history",),
}
LABEL_COLUMNS = {"mp": "hospital_expire_flag", "los": "los_label", "dia": "short_codes", "pro": "short_codes"}
LOS_BINS = ((3, "0"), (7, "1"), (14, "2"))  # < 3 days, 3-7 days, 1-2 weeks; else "3" (> 2 weeks)
_HEADER = re.compile(r"^[ \t]*([A-Za-z][A-Za-z /&()-]{1,60}):", re.MULTILINE)


def admission_sections(text: str) -> str:
    """The admission-time sections of a discharge summary, each as ``NAME: body``, in note order."""
    heads = list(_HEADER.finditer(text))
    kept = []
    for i, match in enumerate(heads):
        header = " ".join(match.group(1).lower().split())
        name = next((n for n, keys in SECTIONS.items() if header.startswith(keys)), None)
        if name is None:
            continue
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = " ".join(text[match.end():end].split())
        if body:
            kept.append(f"{name}: {body}")
    return "\n\n".join(kept)


def los_label(admit: str, discharge: str) -> str:
    days = (datetime.fromisoformat(discharge) - datetime.fromisoformat(admit)).total_seconds() / 86400
    return next((label for limit, label in LOS_BINS if days < limit), "3")


def short_code(code: str) -> str:
    """3-digit ICD-9 category (E-codes keep 4 characters)."""
    code = code.strip().replace(".", "")
    return code[:4] if code.startswith("E") else code[:3]


def _table(mimic_dir: Path, name: str, columns: tuple[str, ...]):
    """Rows (line, dict of the wanted columns) of a MIMIC table; errors name file:line."""
    for candidate in (mimic_dir / f"{name}.csv.gz", mimic_dir / f"{name}.csv"):
        if candidate.exists():
            path = candidate
            break
    else:
        raise DataMissingError(f"MIMIC-III table {name}.csv(.gz) not found in {mimic_dir}")
    for line, row in read_csv_columns(path, columns, "MIMIC-III column names expected"):
        yield line, path, row


def _split(subject: str, seed: int) -> str:
    bucket = int(hashlib.sha256(f"{seed}:{subject}".encode()).hexdigest(), 16) % 10
    return "test" if bucket < 2 else "dev" if bucket == 2 else "train"


def _write_csv(path: Path, label_column: str, rows: list[tuple[str, str, str]]) -> None:
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text", label_column])
        writer.writerows(rows)


def build(mimic_dir: Path, seed: int = 0) -> dict[str, dict[str, list[tuple[str, str, str]]]]:
    """{task: {split: [(hadm_id, text, label), ...]}} from the MIMIC-III tables."""
    mimic_dir = Path(mimic_dir)
    notes: dict[str, str] = {}
    for _, _, row in _table(mimic_dir, "NOTEEVENTS", ("HADM_ID", "CATEGORY", "DESCRIPTION", "TEXT")):
        if row["CATEGORY"].strip() == "Discharge summary" and row["DESCRIPTION"].strip() == "Report" and row["HADM_ID"]:
            text = admission_sections(row["TEXT"])
            if text and row["HADM_ID"] not in notes:
                notes[row["HADM_ID"]] = text
    admissions: dict[str, dict] = {}
    for line, path, row in _table(mimic_dir, "ADMISSIONS", ("SUBJECT_ID", "HADM_ID", "ADMITTIME", "DISCHTIME",
                                                            "HOSPITAL_EXPIRE_FLAG")):
        if row["HOSPITAL_EXPIRE_FLAG"] not in ("0", "1"):
            raise DataError(f"HOSPITAL_EXPIRE_FLAG must be 0 or 1, got {row['HOSPITAL_EXPIRE_FLAG']!r}", path, line)
        try:
            row["los"] = los_label(row["ADMITTIME"], row["DISCHTIME"])
        except ValueError:
            raise DataError("ADMITTIME/DISCHTIME are not dates", path, line) from None
        admissions[row["HADM_ID"]] = row
    codes: dict[str, dict[str, list[str]]] = {"dia": {}, "pro": {}}
    for task, table in (("dia", "DIAGNOSES_ICD"), ("pro", "PROCEDURES_ICD")):
        for _, _, row in _table(mimic_dir, table, ("HADM_ID", "ICD9_CODE")):
            if row["ICD9_CODE"].strip():
                found = codes[task].setdefault(row["HADM_ID"], [])
                if short_code(row["ICD9_CODE"]) not in found:
                    found.append(short_code(row["ICD9_CODE"]))
    out: dict[str, dict[str, list]] = {t: {"train": [], "dev": [], "test": []} for t in LABEL_COLUMNS}
    for hadm in sorted(notes, key=lambda h: int(h) if h.isdigit() else h):
        adm = admissions.get(hadm)
        if adm is None:
            continue
        split = _split(adm["SUBJECT_ID"], seed)
        out["mp"][split].append((hadm, notes[hadm], adm["HOSPITAL_EXPIRE_FLAG"]))
        out["los"][split].append((hadm, notes[hadm], adm["los"]))
        for task in ("dia", "pro"):
            if codes[task].get(hadm):
                out[task][split].append((hadm, notes[hadm], ",".join(codes[task][hadm])))
    return out


def prepare(data_dir: Path, out: Path | None = None, mimic_dir: Path | None = None, seed: int = 0,
            **_options) -> dict[str, int]:
    """Write the four COP tasks to ``out`` (default <data_dir>/cop); ``mimic_dir`` holds the MIMIC-III tables."""
    if mimic_dir is None:
        raise DataMissingError("cop needs the credentialed MIMIC-III tables: --mimic-dir DIR (NOTEEVENTS, "
                               "ADMISSIONS, DIAGNOSES_ICD, PROCEDURES_ICD)")
    out = Path(out) if out else Path(data_dir) / "cop"
    built = build(Path(mimic_dir), seed)
    counts = {}
    for task, splits in built.items():
        for split, rows in splits.items():
            _write_csv(out / task / f"{split}.csv", LABEL_COLUMNS[task], rows)
            counts[f"{task}/{split}"] = len(rows)
    return counts
