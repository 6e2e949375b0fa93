"""A large ``knowledge.exclude_file`` costs memory in proportion to its facts' keys (8 bytes each), not to the
file read into Python objects (#42: a 140 MB file took 4.7 GB, even for --dry-run)."""

from __future__ import annotations

import tracemalloc

import pytest


def _write_facts(path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(f"compound alpha {i} of the liver\tis a\tclass beta {i // 3} disorder\n")


@pytest.mark.slow
def test_a_large_exclude_file_is_streamed_into_compact_keys(tmp_path, monkeypatch):
    import kinject.facts as held_out
    from kinject.api import HeldOutFacts

    # a set this large keeps sorted arrays, as one past SMALL_KEY_SET (262,144) does: the same path at a fifth of the
    # size (and of the time under tracemalloc)
    monkeypatch.setattr(held_out, "SMALL_KEY_SET", 1 << 14)
    path = tmp_path / "held.tsv"
    n = 60_000
    _write_facts(path, n)
    size_mb = path.stat().st_size / 2**20
    tracemalloc.start()
    facts = HeldOutFacts(files=[path])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(facts) == n and facts.triples == []  # nothing of the file kept as Python objects
    # the keys: 8 bytes a pair, name and fact (+ transient arrays): far below the file's size in Python tuples
    # (~150 bytes a string, 3 strings and 2 tuples a fact: > 200 MB here)
    assert peak / 2**20 < 3 * size_mb, (peak / 2**20, size_mb)
    assert facts.blocks_triple("Class beta 7 disorder", "compound alpha 21 of the LIVER")
    assert not facts.blocks_triple("compound alpha 21 of the liver", "class beta 8 disorder")
    assert facts.blocks_text("Compound alpha 5 of the liver is a class beta 1 disorder.")
    assert sum(1 for _ in facts.iter_triples()) == n  # the probe re-reads the file
    assert facts.pair_names(facts.pair_of("compound alpha 4 of the liver", "class beta 1 disorder")) == (
        ("class", "beta", "1", "disorder"), ("compound", "alpha", "4", "of", "the", "liver"))


def test_small_and_large_key_sets_answer_alike(monkeypatch):
    import kinject.facts as knowledge

    triples = [(f"term {i}", "is a", f"parent {i % 7}") for i in range(50)]
    small = knowledge.HeldOutFacts(triples)
    monkeypatch.setattr(knowledge, "SMALL_KEY_SET", 0)  # every key set a sorted array
    large = knowledge.HeldOutFacts(triples)
    assert small._pairs.small is not None and large._pairs.small is None
    assert small.digest == large.digest and len(small) == len(large) == 50
    for head, tail in [("term 3", "parent 3"), ("parent 3", "term 3"), ("term 3", "parent 4"), ("x", "y")]:
        assert small.blocks_triple(head, tail) == large.blocks_triple(head, tail)
    text = "Term 10 is a parent 3; term 11 is a parent 2."
    assert small.strip_text(text) == large.strip_text(text) == ("term 11 is a parent 2.", 1)  # term 10 -> parent 3 is held out


def test_a_facts_file_is_read_once_per_content_in_a_process(tmp_path, monkeypatch):
    """The seeds of --repeats, grid cells and sweep trials prepare the same hold-out: its file is read once, and again
    only when its content changes."""
    import kinject.facts as held_out

    path = tmp_path / "held.tsv"
    _write_facts(path, 30)
    reads = []
    original = held_out.read_fact_file
    monkeypatch.setattr(held_out, "read_fact_file", lambda p: reads.append(p) or original(p))
    build = held_out.held_out_facts
    first, again = build(triples=[], files=(str(path),)), build(triples=[], files=(str(path),))
    assert again is first and len(first) == 30 and len(reads) == 1
    _write_facts(path, 31)
    assert len(build(triples=[], files=(str(path),))) == 31 and len(reads) == 2
    assert build(triples=[("a", "is a", "b")], files=(str(path),)) is not first
