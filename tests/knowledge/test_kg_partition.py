"""KG stats and METIS partitioning: report correctness on a small graph, shuffling, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kinject.interfaces import Triple
from kinject.knowledge.kg.partition import (EntityGraph, graph_stats, metis_parts, partition_report, shuffle_parts,
                                  stream_stats, write_partition)


def clique_triples() -> list[Triple]:
    """Two 5-cliques joined by one bridge edge (plus a duplicate edge and a self-loop)."""
    triples = []
    for group in ("a", "b"):
        for i in range(5):
            for j in range(i + 1, 5):
                triples.append(Triple(f"{group}{i}", "linked", f"{group}{j}"))
    return triples + [Triple("a0", "bridge", "b0"), Triple("a1", "linked", "a0"), Triple("a2", "self", "a2")]


def two_cliques() -> EntityGraph:
    return EntityGraph.from_triples(clique_triples())


def test_stats_counts_and_degrees():
    stats = graph_stats(two_cliques())
    assert (stats["entities"], stats["relations"], stats["triples"]) == (10, 3, 23)
    assert stats["relation_counts"] == {"linked": 21, "bridge": 1, "self": 1}
    assert stats["degree"]["max"] == 6 and sum(stats["degree_histogram"].values()) == 10


def test_streamed_stats_equal_in_memory_stats():
    assert stream_stats(iter(clique_triples()), chunk=4) == graph_stats(two_cliques())
    assert stream_stats(iter([]))["triples"] == 0


@pytest.mark.slow
def test_streamed_stats_memory_is_flat_in_the_number_of_triples():
    import tracemalloc

    def peak(rows: int) -> int:  # 500 entities, 7 relations, ``rows`` triples
        triples = (Triple(f"e{i % 500}", f"r{i % 7}", f"e{(i * 7) % 499}") for i in range(rows))
        tracemalloc.start()
        try:
            assert stream_stats(triples, chunk=2048)["triples"] == rows
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(100)  # first-call allocations (lazy imports, caches) are not the stream's
    small, large = peak(20_000), peak(80_000)
    assert large < 1.3 * small, (small, large)  # holding the edges would need ~4x


def test_metis_finds_the_bridge_and_report_is_exact(tmp_path):
    graph = two_cliques()
    parts = metis_parts(graph, 2)
    report = partition_report(graph, parts, 2)
    assert report["edges"] == 21  # 20 clique edges + bridge; the duplicate and the self-loop collapse
    assert report["edge_cut"] == 1 and report["part_sizes"] == [5, 5]
    assert report["triples_inside"] == 22 and sum(report["triples_per_part"]) == 22
    assert report["random_edge_cut"] >= report["edge_cut"]
    write_partition(graph, parts, report, tmp_path / "out")
    lines = [line for i in range(2) for line in (tmp_path / "out" / f"part-{i}.tsv").read_text().splitlines()]
    assert len(lines) == 22 and not any("bridge" in line for line in lines)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["edge_cut"] == 1


@pytest.mark.parametrize("recursive, expected", [(False, False), (True, True), (None, None)])
def test_metis_asks_pymetis_for_k_way_or_recursive_bisection_as_told(monkeypatch, recursive, expected):
    import pymetis

    asked = []
    real = pymetis.part_graph

    def spy(*args, **kwargs):
        asked.append(kwargs.get("recursive"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", spy)
    parts = metis_parts(two_cliques(), 2, recursive=recursive)
    assert asked == [expected] and sorted(np.bincount(parts)) == [5, 5]


def test_shuffle_moves_entities_and_keeps_sizes():
    parts = np.repeat(np.arange(4), 250)
    moved = shuffle_parts(parts, 0.4, seed=0)
    assert (np.bincount(moved) == 250).all()
    changed = (moved != parts).mean()
    assert 0.2 < changed <= 0.4
    assert (shuffle_parts(parts, 0.0) == parts).all()


def test_cli_stats_on_kg_umls(data_dir, capsys):
    from kinject.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(["kg", "stats", str(data_dir / "kg_umls"), "--json"])
    assert exit_info.value.code in (0, None)
    stats = json.loads(capsys.readouterr().out)
    assert (stats["entities"], stats["relations"], stats["triples"]) == (135, 46, 6529)
    assert stats["relation_counts"]["affects"] == 1022


@pytest.mark.slow
def test_cli_partition_and_errors(data_dir, tmp_path, capsys):
    from kinject.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(["kg", "partition", str(data_dir / "kg_hsdn"), "-k", "3", "--output", str(tmp_path / "p"),
              "--shuffle", "0.5"])
    assert exit_info.value.code in (0, None)
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    assert report["k"] == 3 and sum(report["part_sizes"]) == report["entities"] == 434 and report["shuffle"] == 0.5
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tr\tb\nc\tr\n")
    for args in (["kg", "stats", str(bad)], ["kg", "stats", "no-such-source"],
                 ["kg", "partition", str(bad), "-k", "2", "-o", str(tmp_path / "q")]):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2
    assert "bad.tsv:2" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["kg", "stats", str(bad), "--set", "on_bad_rows=skip", "--json"])
    assert json.loads(capsys.readouterr().out)["bad_rows_skipped"] == 1
