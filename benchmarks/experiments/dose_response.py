"""The table and figure of docs/results.md "Dose-response on the positive control", from a dose-response grid's
folder (benchmarks/grids/dose-response.yaml): per arm, how much knowledge went in (metrics.json ``dose``), whether
it went in (KIMERA: the retrained heads' triplet accuracy on held-out triples; every arm: the knowledge probe), and
what it did to the task - the paired difference to the baseline arm on the same test items and seeds, with the
interval over seeds and examples (``kinject.evidence.compare``; example-only where an arm has one seed).

Usage:
  python -m benchmarks.experiments.dose_response runs/dose-response [--task hpo-isa] [--baseline finetune]
      [--figure docs/figures/dose-response.png] [--json dose-response.json]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HELDOUT_LINE = re.compile(r"held-out KG triples: triplet accuracy ([0-9.]+)")


def kg_heldout_accuracy(seed_dir: Path) -> float | None:
    """KIMERA's triplet accuracy on held-out triples: from the retrain stage's record, else the run log."""
    run = json.loads((seed_dir / "run.json").read_text())
    for stage in run.get("stages", []):
        record = Path(stage.get("dir") or "") / "retrain.json"
        if stage["name"].endswith("-retrain") and record.is_file():
            heldout = json.loads(record.read_text()).get("heldout") or {}
            return (heldout.get("triplet") or {}).get("accuracy")
    log = seed_dir / "kinject.log"
    found = HELDOUT_LINE.findall(log.read_text()) if log.is_file() else []
    return float(found[-1]) if found else None


def stage_seconds(seed_dir: Path) -> float:
    """Wall seconds of the stages this run computed (cache hits count 0)."""
    run = json.loads((seed_dir / "run.json").read_text())
    return sum(s["seconds"] for s in run.get("stages", []) if not s.get("cached"))


def describe_arm(arm: Path) -> dict:
    """Dose, KG held-out accuracy, probe and wall time of one arm (its first seed; a dose is per arm)."""
    seeds = sorted((p for p in arm.glob("seed-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[1]))
    seeds = [s for s in seeds if (s / "metrics.json").is_file()]
    first = seeds[0]
    metrics = json.loads((first / "metrics.json").read_text())
    dose = metrics.get("dose") or {}
    probe = metrics.get("probe") or {}
    return {"arm": arm.name, "seeds": [int(s.name.split("-")[1]) for s in seeds], "dose": dose,
            "kg_heldout_accuracy": kg_heldout_accuracy(first),
            "probe": {k: probe.get(k) for k in ("auroc", "base_auroc", "gain_auroc", "gain_auroc_low",
                                                "gain_auroc_high")} if probe else None,
            "wall_seconds": [round(stage_seconds(s)) for s in seeds]}


def dose_text(dose: dict) -> str:
    if not dose:
        return "-"
    unit = dose.get("unit", "")
    epochs = dose.get("epochs")
    parts = [f"{epochs:.2g} ep" if isinstance(epochs, (int, float)) else None,
             f"{dose['distinct']:,} of {dose['available']:,} {unit}" if dose.get("distinct") is not None
             and dose.get("available") is not None else
             f"{dose['distinct']:,} distinct {unit}" if dose.get("distinct") is not None else None,
             f"{dose['tokens'] / 1e6:.1f}M tokens" if dose.get("tokens") else None]
    return ", ".join(p for p in parts if p)


def seed_sd(row: dict) -> float | None:
    """The arm's standard deviation over seeds (of its test metric)."""
    import statistics

    values = list((row.get("per_seed") or {}).values())
    return statistics.stdev(values) if len(values) > 1 else None


def retraining_share(fixed: dict, reseeded: dict) -> dict | None:
    """The retraining seed's share of the seed variance of the paired differences: one arm retrains once for all
    seeds (``retrain_seed`` fixed), the other once per seed; the excess variance is the retraining seed's."""
    import statistics

    a = (fixed.get("seed_tests") or {}).get("differences") or []
    b = (reseeded.get("seed_tests") or {}).get("differences") or []
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats

    fixed_var, reseeded_var = statistics.variance(a), statistics.variance(b)
    ratio = reseeded_var / fixed_var if fixed_var else float("inf")
    df = (len(b) - 1, len(a) - 1)  # the variance ratio's 95% interval (F distribution)
    return {"fixed_sd": fixed_var ** 0.5, "reseeded_sd": reseeded_var ** 0.5,
            "share": max(reseeded_var - fixed_var, 0.0) / reseeded_var if reseeded_var else 0.0,
            "ratio": ratio, "ratio_low": ratio / stats.f.ppf(0.975, *df), "ratio_high": ratio / stats.f.ppf(0.025, *df)}


def table(rows: list[dict], baseline: str, metric: str = "accuracy") -> str:
    head = (f"| arm | seeds | knowledge dose | KG held-out triplet acc | probe AUROC (base) | test {metric} (sd over seeds) | "
            f"Δ vs {baseline} [95% interval] | interval over | wall s / seed |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        probe = r.get("probe")
        probe_text = f"{probe['auroc']:.3f} ({probe['base_auroc']:.3f})" if probe and probe.get("auroc") else "-"
        kg = f"{r['kg_heldout_accuracy']:.3f}" if r.get("kg_heldout_accuracy") is not None else "-"
        if r["arm"] == baseline:
            delta, over = "baseline", ""
        else:
            delta = f"{r['difference']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] {r['verdict']}"
            over = r["interval"]
        walls = "/".join(str(w) for w in r["wall_seconds"][:1]) + ("" if len(r["wall_seconds"]) < 2 else
                                                                  f" (+{len(r['wall_seconds']) - 1} seeds)")
        sd = seed_sd(r)
        value = f"{r['value']:.3f}" + (f" ({sd:.3f})" if sd is not None else "")
        lines.append(f"| {r['arm']} | {len(r['seeds'])} | {dose_text(r['dose'])} | {kg} | {probe_text} | "
                     f"{value} | {delta} | {over} | {walls} |")
    return "\n".join(lines)


def figure(rows: list[dict], path: Path, baseline: str) -> None:
    """Dose (epochs of the graph's KG rows) against the task difference and the KG held-out accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = sorted((r for r in rows if re.fullmatch(r"kimera-no-mask-isa-ep[0-9.]+", r["arm"])),
                   key=lambda r: r["dose"].get("epochs", 0))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if curve:
        x = [r["dose"]["epochs"] for r in curve]
        left.errorbar(x, [r["difference"] for r in curve],
                      yerr=[[r["difference"] - r["ci_low"] for r in curve], [r["ci_high"] - r["difference"] for r in curve]],
                      marker="o", capsize=4, label="KIMERA no-mask on the is-a graph")
        right.plot(x, [r["kg_heldout_accuracy"] for r in curve], marker="o", label="KIMERA no-mask heads, held-out triples")
    for r, marker in ((r, m) for r in rows for prefix, m in (("kimera-no-mask-isa-shuffled", "x"), ("kimera-no-mask-isa-heldout", "s"),
                                                             ("mop", "^"), ("pretrain", "v"), ("context", "*"))
                      if r["arm"].startswith(prefix) and r["arm"] != baseline):
        epochs = r["dose"].get("epochs") or 1.0
        left.errorbar([epochs], [r["difference"]], yerr=[[r["difference"] - r["ci_low"]], [r["ci_high"] - r["difference"]]],
                      marker=marker, capsize=3, linestyle="none", label=r["arm"])
        if r.get("kg_heldout_accuracy") is not None:
            right.plot([epochs], [r["kg_heldout_accuracy"]], marker=marker, linestyle="none", label=r["arm"])
    left.axhline(0, color="grey", linewidth=0.8)
    left.set_xscale("log")
    left.set_xlabel("knowledge dose (epochs of the graph's rows)")
    left.set_ylabel(f"test accuracy - {baseline} (95% interval)")
    left.legend(fontsize=7)
    right.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
    right.set_xscale("log")
    right.set_ylim(0.45, 1.0)
    right.set_xlabel("knowledge dose (epochs of the graph's rows)")
    right.set_ylabel("triplet accuracy, 500 held-out triples")
    right.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", type=Path, help="the grid's output folder")
    parser.add_argument("--task", default="hpo-isa")
    parser.add_argument("--baseline", default="finetune")
    parser.add_argument("--figure", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from kinject.evidence import compare

    root = args.grid / args.task
    arms = [p for p in sorted(root.iterdir()) if p.is_dir() and any((s / "metrics.json").is_file()
                                                                     for s in p.glob("seed-*"))]
    arms.sort(key=lambda p: (p.name != args.baseline, p.name))
    result = compare(*arms)
    rows = []
    for arm, row in zip(arms, result["metrics"][0]["rows"]):
        rows.append({**describe_arm(arm), **{k: row.get(k) for k in ("value", "per_seed", "difference", "ci_low",
                                                                      "ci_high", "verdict", "interval", "seed_tests")}})
    print(table(rows, args.baseline, result["metrics"][0]["metric"]))
    by_arm = {r["arm"]: r for r in rows}
    for fixed, reseeded in ((f, f"{f.rsplit('-ep', 1)[0]}-reseed") for f in by_arm if "-ep" in f):
        share = retraining_share(by_arm[fixed], by_arm[reseeded]) if reseeded in by_arm else None
        if share and by_arm[reseeded]["dose"].get("epochs") == by_arm[fixed]["dose"].get("epochs"):
            print(f"retraining seed at {fixed}'s dose: sd of the paired differences over seeds {share['fixed_sd']:.4f} "
                  f"with the retraining fixed, {share['reseeded_sd']:.4f} with it following the seed; its share of "
                  f"the variance {share['share']:.0%} (variance ratio {share['ratio']:.2f}, 95% interval "
                  f"{share['ratio_low']:.2f}-{share['ratio_high']:.2f})")
    if args.figure:
        figure(rows, args.figure, args.baseline)
        print(f"figure: {args.figure}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
