"""`kinject report`: one Markdown page and one self-contained HTML page with every section, written atomically."""

from __future__ import annotations

import base64
import re

import pytest

from evidence_runs import accuracy, classification_records, make_run
from helpers import run_kinject as kinject

SECTIONS = ("## Runs", "## Results", "## Paired comparisons", "## Reported in the papers", "## Plots",
            "## Commands and versions")


def _png(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.imshow([[0, 1], [1, 0]])
    fig.savefig(path)
    plt.close(fig)
    return path


@pytest.fixture
def runs(tmp_path):
    for name, correct in (("base", 31), ("better", 38)):  # the baseline beats the constant by its margin
        for seed in (1, 2):
            records = classification_records(40, correct + seed)
            make_run(tmp_path / name / f"seed-{seed}", records, seed=seed,
                     metrics={"test": {"accuracy": accuracy(records), "f1_macro": 0.5}})
    make_run(tmp_path / "nopreds", classification_records(40, 10), metrics={"test": {"accuracy": 0.25}})
    (tmp_path / "nopreds" / "predictions" / "test.jsonl").unlink()
    capr = [{"id": f"q{i}", "gold": ["p0"], "ranking": ["p0", "p1"] if i % 2 else ["p1", "p0"], "scores": [1.0, 0.0],
             "pred": "p0" if i % 2 else "p1"} for i in range(10)]
    run = make_run(tmp_path / "capr", capr, task={"name": "capr", "dataset": "medquad"}, strategy="kimera",
                   metrics={"test": {"recall@1": 0.5, "mrr": 0.75, "queries": 10}}, labels=("irrelevant", "relevant"))
    _png(run / "plots" / "mask.png")
    _png(run / "model" / "ignored.png")  # not a plot of the run
    return tmp_path


def test_report_has_every_section_in_markdown_and_html(runs, tmp_path, capsys):
    out = tmp_path / "report"
    args = [str(runs / name) for name in ("base", "better", "nopreds", "capr")]
    assert kinject("report", *args, "-o", str(out)) == 0
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for heading in SECTIONS:
        assert heading in md and f"<h2>{heading[3:]}" in html, heading
    # comparisons: the textcls pair, with the baseline first; the run without predictions named
    assert ("| run | seeds | accuracy | Δ vs baseline | 95% CI (seeds (t) × examples) | verdict | 95% CI (examples "
            "only: these models) | t-test p | Wilcoxon p | verdict's p (Holm) | verdict (Holm) |") in md
    assert re.search(r"\| better \| 2 † \| 0.9875 \| \+0.1750 \| \[\+0\.\d+, \+0\.\d+\] \| gain \| "
                     r"\[\+0\.\d+, \+0\.\d+\] \| [^|]+ \| 0.5 \| (0.0\d+) \(Holm \1\) \| gain \|",
                     md)  # Wilcoxon 2/2**2; one comparison: Holm's p is the raw one
    assert "† 2-4 paired seeds" in md and "not learned" not in md
    assert "Without test predictions (not compared): nopreds." in md  # named below the folder the runs share
    # the papers' figures beside ours (KIMERA Table 1, MedQuAD R@1; ours x 100)
    assert "| kimera: Table 1 (test; cross-encoder CAPR, left; clinical outcome prediction AUROC, right) | " \
           "KIMERA hard-mask | MedQuAD | recall@1 | 71.94 |" in md
    assert "| kinject: capr | tiny | kimera, 1 seed, test | recall@1 | 50.00 |" in md
    assert "HealthQA" not in md  # a jsonl-dataset figure does not match a medquad run
    assert re.search(r"\| 1 \| 0.5000 \| 0.7500 \| 10 \|", md)  # a count stays an int, metrics keep 4 digits
    # plots: copied beside the Markdown, embedded in the HTML; the model folder's image is no plot
    assert (out / "images" / "000-mask.png").exists() and "](images/000-mask.png)" in md
    encoded = base64.b64encode((runs / "capr" / "plots" / "mask.png").read_bytes()).decode()
    assert f"data:image/png;base64,{encoded}" in html and 'src="images/' not in html and "ignored.png" not in md
    # each run's command and versions
    assert "kinject run finetune --task textcls --seed 2" in md and "kinject 0.1.0, torch 2.x" in md
    assert (out / "comparisons.json").exists()


def test_report_is_replaced_whole_and_never_overwrites_other_folders(runs, tmp_path, capsys):
    out = tmp_path / "report"
    assert kinject("report", str(runs / "base"), "-o", str(out)) == 0
    assert "Fewer than two runs with predictions" in (out / "report.md").read_text()
    assert kinject("report", str(runs / "base"), str(runs / "better"), "-o", str(out)) == 0
    assert "Fewer than two" not in (out / "report.md").read_text()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    capsys.readouterr()
    assert kinject("report", str(runs / "base"), "-o", str(other)) == 2
    assert "not a kinject report folder" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    assert kinject("report", str(tmp_path / "nothing"), "-o", str(tmp_path / "r2")) == 2
    assert not (tmp_path / "r2").exists() and not list(tmp_path.glob(".r2*"))


def test_task_group_folder_expands_to_its_members(tmp_path):
    from kinject.evidence.runs import find_runs

    make_run(tmp_path / "blurb" / "bc5chem", [{"id": "s0", "gold": ["O"], "pred": ["O"]}], task={"name": "bc5chem"})
    make_run(tmp_path / "blurb" / "hoc", [{"id": "1", "gold": [], "pred": []}], task={"name": "hoc"})
    assert [s.task for s in find_runs([str(tmp_path / "blurb")], groups=True)] == ["bc5chem", "hoc"]
    from kinject.errors import KinjectError

    with pytest.raises(KinjectError, match="a folder of 2 runs"):
        find_runs([str(tmp_path / "blurb")])


def test_results_page_blocks_are_generated_from_the_runs(runs, tmp_path):
    """docs/results.md's numbers come from run directories: python -m benchmarks.experiments.results_page rewrites each
    marked block with comparison_markdown (mean ± std, per-seed values, paired interval) and leaves prose alone."""
    import subprocess
    import sys
    from pathlib import Path

    from kinject.evidence.report import comparison_markdown

    text = comparison_markdown([str(tmp_path / "base"), str(tmp_path / "better")], metrics=["accuracy"], root=tmp_path)
    assert "| base | 2 |" in text and "baseline" in text
    better = next(line for line in text.splitlines() if line.startswith("| better |"))
    cells = [c.strip() for c in better.strip("|").split("|")]
    assert cells[2].startswith("0.98") and "±" in cells[2]  # (39 + 40) / 2 / 40 = 0.9875
    assert cells[3] == "0.975, 1.000" and cells[4].startswith("+0.175")  # per seed; 0.9875 - 0.8125
    low, high = (float(x) for x in cells[5].strip("[]").split(","))
    assert 0 < low < 0.175 < high

    page = tmp_path / "results.md"
    page.write_text("intro prose\n<!-- generated:demo -->\nstale numbers\n<!-- /generated:demo -->\nmore prose\n"
                    "<!-- generated:terms -->\n<!-- /generated:terms -->\n")
    (tmp_path / "terms.csv").write_text(f"term,tokenizer,pieces\nlymphoma,{tmp_path}/vocab/tokenizer,4\n")
    manifest = tmp_path / "results.yaml"
    manifest.write_text("blocks:\n  demo:\n    runs: [base, better]\n    metrics: [accuracy]\n    resamples: 500\n"
                        "  terms:\n    kind: csv\n    path: terms.csv\n")
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "benchmarks.experiments.results_page", "--runs", str(tmp_path), "--page", str(page), "--manifest", str(manifest)]
    assert subprocess.run([*cmd, "--check"], cwd=root).returncode == 1  # stale before
    assert subprocess.run(cmd, cwd=root).returncode == 0
    new = page.read_text()
    assert new.startswith("intro prose\n<!-- generated:demo -->\n") and "<!-- /generated:demo -->\nmore prose\n" in new
    assert new.endswith("<!-- generated:terms -->\n| term | tokenizer | pieces |\n|---|---|---|\n| lymphoma | vocab/tokenizer | 4 |\n"
                        "<!-- /generated:terms -->\n")  # a path under --runs is shown relative to it
    assert "stale numbers" not in new and "| better | 2 † |" in new
    assert subprocess.run([*cmd, "--check"], cwd=root).returncode == 0  # up to date after


def test_metrics_markdown_tables_nested_values_per_seed(tmp_path):
    from kinject.evidence.report import metrics_markdown

    for seed, value in ((1, 0.5), (2, 0.7)):
        make_run(tmp_path / "a" / f"seed-{seed}", classification_records(4, 2), seed=seed,
                 metrics={"test": {"teacher/f1": value, "ece": {"student": value / 10}}, "comparison": {"n": 4}})
    text = metrics_markdown([str(tmp_path / "a")], "test", ["teacher/f1", "ece/student", "missing"], root=tmp_path)
    row = [c.strip() for c in text.splitlines()[2].strip("|").split("|")]
    assert row[:2] == ["a", "2"] and row[2] == "0.6000 ± 0.1414 (0.500, 0.700)"
    assert row[3].startswith("0.0600 ± ") and row[4] == "-"
    top = metrics_markdown([str(tmp_path / "a")], None, ["comparison/n"])
    assert "| 4 (4.000, 4.000) |" in top  # a count: shown whole, then per seed


def test_results_manifest_and_page_name_the_same_blocks():
    """Every block docs/results.yaml lists has its markers in docs/results.md, and every marked block is listed
    (a block without markers fails the page's regeneration; markers without a block keep stale numbers)."""
    import re
    from pathlib import Path

    import yaml

    docs = Path(__file__).resolve().parents[2] / "docs"
    listed = set((yaml.safe_load((docs / "results.yaml").read_text())["blocks"]))
    page = (docs / "results.md").read_text()
    opened = re.findall(r"^<!-- generated:([\w.-]+) -->$", page, re.M)
    closed = re.findall(r"^<!-- /generated:([\w.-]+) -->$", page, re.M)
    assert len(opened) == len(set(opened)) and sorted(opened) == sorted(closed)
    assert set(opened) == listed
