"""How much of a NER set's entity mentions the HPO names: the share of gold mentions (and of distinct mention
strings) that are exactly an HPO term's name or synonym, lower-cased, punctuation dropped. It says how much a
graph of HPO terms can tell a model about a real task's entities (docs/results.md "On a real task").

Usage:
  python -m benchmarks.experiments.hpo_coverage [--task ncbi-disease] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Iterable, Iterator

from kinject.tasks import read_terms
from kinject.tasks.token import read_conll

_WORD = re.compile(r"[a-z0-9]+")


def normal(text: str) -> str:
    """Lower-cased words, punctuation and spacing dropped ("Breast-cancer" and "breast cancer" match)."""
    return " ".join(_WORD.findall(text.lower()))


def mentions(sentences: Iterable[dict]) -> Iterator[str]:
    """The gold entity mentions of IOB-tagged sentences (``words``, ``tags``), as text."""
    for sentence in sentences:
        current: list[str] = []
        for word, tag in zip(sentence["words"], sentence["tags"]):
            if tag.startswith("I-") and current:
                current.append(word)
                continue
            if current:
                yield " ".join(current)
            current = [word] if tag.startswith("B-") else []
        if current:
            yield " ".join(current)


def hpo_names() -> set[str]:
    """Every current HPO term's name and synonyms, normalised."""
    return {normal(name) for term in read_terms() if not term.obsolete for name in (term.name, *term.synonyms)}


def coverage(found: list[str], names: set[str]) -> dict:
    """Mentions (all and distinct) whose normalised text is an HPO name."""
    texts = [normal(m) for m in found]
    distinct = set(texts)
    return {"mentions": len(texts), "named": sum(t in names for t in texts),
            "distinct": len(distinct), "distinct_named": sum(t in names for t in distinct)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="ncbi-disease", help="a CoNLL NER task of the catalogue")
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data")
    args = parser.parse_args()
    from kinject.api import registry

    task_class = registry("tasks").get(args.task)
    folder = args.data_dir / task_class.dataset
    names = hpo_names()
    print(f"{args.task}: {len(names):,} HPO names and synonyms")
    for split, file in task_class.info.splits.items():
        found = coverage(list(mentions(read_conll(folder / file, task_class.entity_types,
                                                  task_class.default_type))), names)
        print(f"  {split}: {found['named']:,} of {found['mentions']:,} mentions ({found['named'] / found['mentions']:.1%}), "
              f"{found['distinct_named']:,} of {found['distinct']:,} distinct ({found['distinct_named'] / found['distinct']:.1%})")


if __name__ == "__main__":
    main()
