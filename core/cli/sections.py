"""The sections of a finished run's metrics that are not a split, as `kinject run` and `kinject eval` print them
under the metrics table: the knowledge probe, the knowledge dose and the paired comparison. Other sections stay in
metrics.json and the run's report."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from kinject.evidence import format_value
from kinject.knowledge.dose import dose_line


def show_section(console, name: str, section: Any) -> bool:
    """Print section ``name`` (over seeds its numbers are summaries) on the rich ``console``; False when it is not
    one this module shows."""
    if not isinstance(section, dict):
        return False
    if name == "probe" and _mean(section.get("auroc")) is not None:
        show_probe(console, section)
    elif name == "dose" and "distinct" in section:
        try:
            console.print(dose_line({k: _mean(v) for k, v in section.items()}), highlight=False, soft_wrap=True)
        except (KeyError, TypeError, ValueError):
            pass
    elif name == "comparison" and "difference" in section:
        show_comparison(console, section)
    else:
        return False
    return True


def _mean(value: Any) -> Any:
    return value["mean"] if isinstance(value, dict) and "mean" in value else value


def show_probe(console, section: dict) -> None:
    """The knowledge probe's line: AUROC against the base model's, the gain and its interval, one sentence when the
    interval excludes 0."""
    low, high = _mean(section.get("gain_auroc_low")), _mean(section.get("gain_auroc_high"))
    interval = f" [{low:+.4f}, {high:+.4f}]" if isinstance(low, float) and isinstance(high, float) else ""
    kind = "generalisation" if _mean(section.get("generalisation")) else "memorisation"
    sentence = probe_sentence(low, high)
    console.print(f"knowledge probe ({kind}): AUROC {format_value(section['auroc'])} (base model "
                  f"{format_value(section.get('base_auroc'))}), gain {_mean(section.get('gain_auroc')):+.4f}"
                  f"{interval}" + (f": {sentence}" if sentence else ""), highlight=False, soft_wrap=True)


def probe_sentence(low, high) -> str:
    """One plain sentence for a probe AUROC gain whose interval excludes 0 (else "")."""
    if not (isinstance(low, float) and isinstance(high, float)):
        return ""
    if high < 0:
        return ("the probe's AUROC fell below the base model's: this model's frozen features separate these facts "
                "less well than the base model's did")
    if low > 0:
        return ("the probe's AUROC rose above the base model's: this model's frozen features separate these facts "
                "better than the base model's did")
    return ""


def show_comparison(console, section: dict) -> None:
    """The ``comparison`` section: the two systems' metric, their difference and its paired bootstrap interval, the
    verdict when nothing was learned; over seeds, the difference's mean ± std."""
    c = section
    names = f"[bold]{escape(str(c.get('other_name', '?')))} vs {escape(str(c.get('baseline_name', '?')))}[/] on " \
            f"{escape(str(c.get('split', '?')))} {escape(str(c.get('metric', '?')))}"
    if isinstance(c["difference"], dict):  # --repeats: over seeds
        console.print(f"{names}: difference {format_value(c['difference'])} (paired, per seed)", soft_wrap=True)
        return
    verdict = str(c.get("verdict") or "")
    note = f" ({verdict})" if verdict.startswith("not learned") or not c.get("identical") and verdict else \
        " (identical predictions)" if c.get("identical") else ""
    console.print(f"{names}: "
                  f"{c['other']:.4f} vs {c['baseline']:.4f}, difference {c['difference']:+.4f} "
                  f"({c['confidence']:.0%} paired bootstrap CI {c['ci_low']:+.4f} .. {c['ci_high']:+.4f}, "
                  f"n={c['n']} examples; one seed: these models){note}", soft_wrap=True)
    for side, flag in (c.get("not_learned") or {}).items():
        if isinstance(flag, dict) and flag.get("reason"):
            system = c.get("baseline_name") if side == "baseline" else c.get("other_name")
            console.print(f"not learned: {system}: {flag['reason']}", highlight=False, soft_wrap=True)
