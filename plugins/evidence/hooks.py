"""The evidence library's hook plugin ``evidence`` (entry point group ``kinject.hooks``): shows a finished run's paired
comparison under its metrics table (the kernel's ``kinject_show_section``)."""

from __future__ import annotations

from typing import Any

from kinject.api import hookimpl
from kinject.plugins.training import format_value


@hookimpl
def kinject_show_section(console, name: str, section: Any) -> bool | None:
    """The ``comparison`` section: the two systems' metric, their difference and its paired bootstrap interval, the
    verdict when nothing was learned; over seeds, the difference's mean ± std."""
    if name != "comparison" or not isinstance(section, dict) or "difference" not in section:
        return None
    c = section
    if isinstance(c["difference"], dict):  # --repeats: over seeds
        console.print(f"comparison (paired, per seed): difference {format_value(c['difference'])}", soft_wrap=True)
        return True
    verdict = str(c.get("verdict") or "")
    note = f" ({verdict})" if verdict.startswith("not learned") or not c.get("identical") and verdict else \
        " (identical predictions)" if c.get("identical") else ""
    console.print(f"[bold]{c['other_name']} vs {c['baseline_name']}[/] on {c['split']} {c['metric']}: "
                  f"{c['other']:.4f} vs {c['baseline']:.4f}, difference {c['difference']:+.4f} "
                  f"({c['confidence']:.0%} paired bootstrap CI {c['ci_low']:+.4f} .. {c['ci_high']:+.4f}, "
                  f"n={c['n']} examples; one seed: these models){note}", soft_wrap=True)
    for side, flag in (c.get("not_learned") or {}).items():
        if isinstance(flag, dict) and flag.get("reason"):
            system = c.get("baseline_name") if side == "baseline" else c.get("other_name")
            console.print(f"not learned: {system}: {flag['reason']}", highlight=False, soft_wrap=True)
    return True
