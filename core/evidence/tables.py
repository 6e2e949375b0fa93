"""A comparison as text: the table `kinject compare` prints and the report and leaderboard reuse, its notes, and
the cells every view shares (the verdict as shown, the seeds, the interval's heading) - so a heading always names
the interval its rows carry, and a system that learned nothing is named wherever a verdict is shown."""

from __future__ import annotations

from typing import Any

FEW_SEEDS = 5  # below this many paired seeds (and from 2) the table flags the verdict as provisional


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 seed``, ``3 seeds``, ``0 cells``: a count and its noun, singular for exactly 1 (``many``: an irregular
    plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def _number(value: float) -> str:
    """4 decimals, or 4 significant digits for a large or tiny value (a perplexity of 1.8e9 is not 19 digits)."""
    return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e4 else f"{value:.4g}"


def format_value(value) -> str:
    """A metric value as the tables show it: a number to 4 decimals (4 significant digits when large or tiny), a
    summary over seeds (:func:`.seeds.summarize_seeds`) as ``mean ± std (n=N)``, anything else as text."""
    if isinstance(value, dict) and "mean" in value:
        return f"{_number(value['mean'])} ± {_number(value['std'])} (n={value['n']})"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    return str(value)


def shown_verdict(row: dict, key: str = "verdict") -> str:
    """The verdict as every view shows it: ``not learned: <baseline>`` first, then identical predictions, then the
    verdict (``1 seed: no verdict`` with one paired seed), ``conditional on one <stage>`` where the paired seeds
    share one draw of a stage, and how many of the arm's seeds collapsed. ``key``: ``verdict_holm`` for the
    Holm-adjusted one."""
    verdict = row.get(key) or ""
    if verdict.startswith("not learned"):
        return verdict
    if row.get("identical"):
        return "identical predictions"
    shared = row.get("shared_stages") or {}
    if shared.get("conditional") and verdict in ("gain", "loss", "no evidence"):
        verdict += f", {shared['text']}"
    return verdict + (f"; {row['collapsed']}" if row.get("collapsed") else "")


def paired_count(row: dict) -> int:
    """How many seeds the row's difference pairs (0: two single runs of different seeds)."""
    if "seeds_paired" in row:
        return int(row["seeds_paired"])
    return len(row["paired_seeds"]) if row.get("paired_seeds") else len(row.get("seeds") or [])


def seeds_cell(row: dict, compared: bool = True) -> str:
    """``3``, ``5 (3 paired) †``, ``1 (seed 43 vs 42: unpaired)``; ``†`` for 2 to FEW_SEEDS-1 paired seeds."""
    text = str(len(row["seeds"]))
    if row.get("unpaired"):
        return text + f" (seed {row['unpaired']['seed']} vs {row['unpaired']['baseline_seed']}: unpaired)"
    if row.get("paired_seeds"):
        text += f" ({len(row['paired_seeds'])} paired)"
    paired = paired_count(row)
    return text + (" †" if compared and 2 <= paired < FEW_SEEDS else "")


def interval_heading(rows: list[dict], level: str) -> tuple[str, bool]:
    """The verdict interval's column heading and whether each cell must name its interval (rows that carry
    different kinds, e.g. one pair of runs with one seed among several with five)."""
    kinds = {r.get("interval") for r in rows if "ci_low" in r}
    if len(kinds) == 1:
        return f"{level} CI ({kinds.pop()})", False
    return f"{level} CI (verdict's; over what: per row)", True


def interval_cell(row: dict, each: bool) -> str:
    text = f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"
    return text + (f" over {row['interval']}" if each else "")


def difference_cell(row: dict, baseline_value: float | None) -> str:
    """The difference, with the baseline's value on the paired seeds where it differs from its shown value."""
    text = f"{row['difference']:+.4f}"
    base = row.get("baseline_value")
    if base is not None and baseline_value is not None and abs(base - baseline_value) > 5e-5:
        text += f" (vs {base:.4f} on the paired seeds)"
    return text


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def comparison_table(result: dict[str, Any], block: dict[str, Any],
                     adjusted: bool = False) -> tuple[list[str], list[list[str]]]:
    """Headers and rows (text) of one metric's comparison: run, seeds, value (over the seeds its difference uses),
    difference, the verdict's interval (its kind in the heading, or per cell when rows differ) and the verdict, the
    example-only interval, p-values. ``†``: 2 to 4 paired seeds. ``adjusted``: two more columns, the verdict's
    p-value (raw and Holm-adjusted, :mod:`.multiplicity`) and the adjusted verdict."""
    from kinject.evidence.multiplicity import HEADLINE, p_cell

    level = f"{result['confidence'] * 100:g}%"
    heading, each = interval_heading(block["rows"][1:], level)
    headers = ["run", "seeds", block["metric"], "Δ vs baseline", heading, "verdict",
               f"{level} CI (examples only: these models)", "t-test p", "Wilcoxon p"] + \
        (["verdict's p (Holm)", "verdict (Holm)"] if adjusted else [])
    rows = []
    base_value = block["rows"][0]["value"]
    for i, row in enumerate(block["rows"]):
        tests = row.get("seed_tests") or {}
        if i == 0:
            cells = ["baseline", "", "", "", "", ""] + (["", ""] if adjusted else [])
        else:
            cells = [difference_cell(row, base_value), interval_cell(row, each), shown_verdict(row),
                     f"[{row['ci_low_examples']:+.4f}, {row['ci_high_examples']:+.4f}]" if "ci_low_examples" in row
                     else "", _p(tests.get("t_pvalue")), _p(tests.get("wilcoxon_pvalue"))]
            if adjusted:
                cells += [p_cell(row), HEADLINE if row.get("headline") else
                          shown_verdict(row, "verdict_holm") if row.get("verdict_holm") else "-"]
        rows.append([row["run"], seeds_cell(row, i > 0), f"{row['value']:.4f}", *cells])
    if any("probe" in row for row in block["rows"]):
        headers.append("probe AUROC (base; gain)")
        for cells, row in zip(rows, block["rows"]):
            probe = row.get("probe")
            cells.append("-" if not probe else f"{probe['model']:.4f} ({probe['base']:.4f}; {probe['gain']:+.4f})")
    return headers, rows


INTERVAL_NOTES = {
    "seeds-t+examples": "each example-bootstrap replicate plus a seed effect drawn from the t distribution over the "
                        "paired seeds (coverage 0.93-0.96 at 3-10 seeds that draw independently in docs/evidence.md's "
                        "simulation; lower where seeds share a draw or collapse)",
    "two-way": "two-way (pigeonhole) bootstrap over seeds and units",
    "two-way-corrected": "two-way bootstrap, its seed part widened by √(S/(S-1))",
    "seeds-t": "t-interval over the per-seed differences",
    "wider": "the wider of the t-interval over seeds and the example interval",
}


def table_notes(result: dict[str, Any], block: dict[str, Any]) -> list[str]:
    """The lines printed under a comparison table: what the intervals and flags mean."""
    from kinject.evidence.learned import describe

    rows = block["rows"][1:]
    units = "units" if any(r.get("units", 0) < result["examples"] for r in rows) else "examples"
    notes = []
    for kind in dict.fromkeys(r.get("interval_kind") for r in rows if paired_count(r) >= 2):
        if kind in INTERVAL_NOTES:
            notes.append(f"Verdict's interval, over seeds and {units}: {INTERVAL_NOTES[kind]}; the verdict reads "
                         "it (gain / loss / no evidence).")
    notes.append(f"CI (examples only): {units} resampled with each seed's model fixed - conditional on these "
                 "trained models.")
    if any(paired_count(r) == 1 for r in rows):
        notes.append("1 seed: the interval is over examples only and says nothing about another seed, so no "
                     "verdict is given; run more seeds (--repeats) for one.")
    if any(r.get("unpaired") for r in rows):
        notes.append("unpaired: the two runs were trained with different seeds; their predictions are compared "
                     "example by example, and the seed difference is part of the difference.")
    if any(2 <= paired_count(r) < FEW_SEEDS for r in rows):
        notes.append(f"† 2-{FEW_SEEDS - 1} paired seeds: seed-to-seed spread is estimated from few runs; "
                     "treat the verdict as provisional.")
    if any(r.get("paired_seeds") for r in rows):
        notes.append("(N paired): a run with other seeds than the baseline is compared over the seeds both have; "
                     "its value is its mean over those seeds.")
    if any(shown_verdict(r) == "identical predictions" for r in rows):
        notes.append("identical predictions: the two systems score every example alike (difference 0 by "
                     "construction, e.g. a method that changed nothing).")
    notes += shared_notes(rows)
    if block["rows"][0].get("not_learned"):
        notes.append(f"not learned: {block['rows'][0]['run']}: {describe(block['rows'][0]['not_learned'])} - a "
                     "baseline that learned nothing voids every comparison with it.")
    notes += collapse_notes(rows)
    if any(r.get("headline") for r in rows) or any(r.get("p_holm") is not None for r in rows):
        notes.append(HOLM_NOTE)
    if not block.get("greater_is_better", True):
        notes.append(f"{block['metric']}: lower is better (a negative difference is a gain).")
    return notes


HOLM_NOTE = ("verdict's p (Holm): the p-value of the verdict's interval (twice the share of its replicates beyond "
             "0), then Holm-adjusted over every comparison shown but the headline; verdict (Holm) is the verdict "
             "that survives the adjustment. The headline (declared before the runs) is not adjusted.")
#: coverage of the default interval when seeds collapse (benchmarks/coverage.py, docs/evidence.md)
BIMODAL_COVERAGE = "0.67-0.70 at 3-5 seeds, 0.88 at 10"


def shared_notes(rows: list[dict]) -> list[str]:
    """One line per row whose paired seeds share a stage's draw: conditional on it, or over its draws."""
    notes = []
    for row in rows:
        shared = row.get("shared_stages")
        if not shared:
            continue
        names = ", ".join(shared["stages"])
        draws = "one draw" if shared["draws"] == 1 else f"{shared['draws']} draws"
        if shared["conditional"]:
            notes.append(f"{row['run']}: {shared['text']} - its {shared['seeds']} paired seeds share {draws} of "
                         f"{names} (the same stage key in their run.json), so the interval says what other seeds "
                         "would do with that draw, not what another draw would; seed the stage per run for that.")
        else:
            notes.append(f"{row['run']}: its {shared['seeds']} paired seeds share {shared['draws']} draws of {names}; "
                         f"the interval's seed part is a t over those draws ({shared['draws'] - 1} degrees of "
                         "freedom).")
    return notes


def collapse_notes(rows: list[dict]) -> list[str]:
    """One line per arm whose seeds learned nothing: counted in its difference, as harm."""
    from kinject.evidence.learned import describe

    return [f"{row['collapsed']}: {row['run']}: {describe(row['not_learned'])} - an outcome of the method, counted in "
            f"its difference as harm. Seeds that collapse make the outcome bimodal, where the interval covers "
            f"less than 0.95 ({BIMODAL_COVERAGE} in docs/evidence.md's simulation)."
            for row in rows if row.get("collapsed") and row.get("not_learned")]


def probe_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """The knowledge probe compared between arms (paired over the same probe-test facts), or None."""
    probe = result.get("probe")
    if not probe or not probe.get("rows"):
        return None
    level = f"{result['confidence'] * 100:g}%"
    heading, each = interval_heading(probe["rows"][1:], level)
    headers = ["run", "seeds", "probe AUROC", "Δ vs baseline", heading, "verdict"]
    rows = []
    for i, row in enumerate(probe["rows"]):
        cells = ["baseline", "", ""] if i == 0 else [f"{row['difference']:+.4f}", interval_cell(row, each),
                                                    shown_verdict(row)]
        rows.append([row["run"], seeds_cell(row, i > 0), f"{row['value']:.4f}", *cells])
    return headers, rows


def print_comparison(result: dict[str, Any], console) -> None:
    """One rich table per metric: value, difference to the baseline, intervals, verdict, per-seed p-values; then the
    knowledge probe compared between arms."""
    from rich.markup import escape
    from rich.table import Table

    def show(title: str, headers: list[str], rows: list[list[str]]) -> None:
        table = Table(title=title, title_justify="left")
        for i, column in enumerate(headers):
            table.add_column(escape(column), justify="left" if i == 0 else "right", overflow="fold")
        for row in rows:
            table.add_row(*map(escape, row))
        console.print(table)

    for block in result["metrics"]:
        headers, rows = comparison_table(result, block)
        show(f"{result['task']} {result['split']} {block['metric']}: {result['examples']} examples, "
             f"{result['resamples']} bootstrap resamples", headers, rows)
        for note in table_notes(result, block):
            console.print(note, highlight=False, soft_wrap=True)
    probe = result.get("probe")
    if probe:
        found = probe_table(result)
        if found:
            show(f"knowledge probe ({probe['kind']}: held-out facts of the graph when the run held facts out, else "
                 "edges of the injected graph; docs/knowledge-sources.md)", *found)
        if probe.get("note"):
            console.print(f"probe: {probe['note']}", highlight=False, soft_wrap=True)
