"""Triples files: layouts, streaming, every filter, every bad-input case."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from kinject.errors import DataError
from kinject.interfaces import Environment, Triple
from kinject.knowledge.sources.filters import FilterFields, apply_filters, inverse_candidates
from kinject.knowledge.sources.triples import TriplesSource


@pytest.fixture
def env(tmp_path) -> Environment:
    return Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def triples(source, env) -> list[Triple]:
    return list(source.iter_triples(env))


def test_plain_tsv_with_weight_column(tmp_path, env):
    path = write(tmp_path / "kg.tsv", "a\tr\tb\t0.5\nb\tr\tc\t2\n")
    out = triples(TriplesSource(path=str(path)), env)
    assert out == [Triple("a", "r", "b", 0.5), Triple("b", "r", "c", 2.0)]


def test_csv_jsonl_and_gzip(tmp_path, env):
    csv_path = write(tmp_path / "kg.csv", 'head,relation,tail\n"x, y",r,z\n')
    out = triples(TriplesSource(path=str(csv_path), head="head", relation="relation", tail="tail"), env)
    assert out == [Triple("x, y", "r", "z")]
    rows = [{"head": "a", "relation": "r", "tail": "b", "weight": 3}, {"head": "c", "relation": "s", "tail": "d"}]
    jl = tmp_path / "kg.jsonl.gz"
    with gzip.open(jl, "wt") as handle:
        handle.write("\n".join(json.dumps(r) for r in rows))
    out = triples(TriplesSource(path=str(jl), weight="weight"), env)
    assert out == [Triple("a", "r", "b", 3.0), Triple("c", "s", "d", 1.0)]


def test_kgbert_folder_maps_ids_to_text(tmp_path, env):
    write(tmp_path / "entity2text.txt", "e1\tfirst entity\ne2\tsecond entity\n")
    write(tmp_path / "relation2text.txt", "r1\trelates to\n")
    write(tmp_path / "train.tsv", "e1\tr1\te2\n")
    write(tmp_path / "test.tsv", "e2\tr1\te1\n")
    src = TriplesSource(path=str(tmp_path))
    assert triples(src, env) == [Triple("first entity", "relates to", "second entity"),
                                 Triple("second entity", "relates to", "first entity")]
    assert len(triples(TriplesSource(path=str(tmp_path), splits=["train"]), env)) == 1


def test_link_list_with_constant_relation_and_named_columns(tmp_path, env):
    path = write(tmp_path / "links.tsv", "src\tdst\tscore\nA\tB\t1.5\n")
    out = triples(TriplesSource(path=str(path), head="src", tail="dst", weight="score",
                                relation_name="linked to"), env)
    assert out == [Triple("A", "linked to", "B", 1.5)]


@pytest.mark.parametrize("content,reason", [
    (b"a\tr\tb\nc\tr\n", "expected at least 3 columns"),
    (b"a\tr\tb\n\tr\tc\n", "empty head"),
    (b"a\tr\tb\nc\tr\t \n", "empty tail"),
    (b"a\tr\tb\n\xff\xfe\tr\tc\n", "invalid UTF-8"),
    (b"a\tr\tb\t1\nc\tr\td\tmany\n", "is not a number"),
])
def test_bad_rows_name_file_and_line_or_are_skipped(tmp_path, env, content, reason):
    path = write(tmp_path / "bad.tsv", content)
    weight = 3 if b"\t1\n" in content else None
    with pytest.raises(DataError) as err:
        triples(TriplesSource(path=str(path), weight=weight), env)
    assert f"{path}:2:" in str(err.value) and reason in str(err.value)
    src = TriplesSource(path=str(path), weight=weight, on_bad_rows="skip")
    assert len(triples(src, env)) == 1
    assert src.bad_rows.count == 1 and reason in src.bad_rows.first


def test_unknown_id_without_text_mapping(tmp_path, env):
    write(tmp_path / "entity2text.txt", "e1\tone\ne2\ttwo\n")
    write(tmp_path / "train.tsv", "e1\tr\te2\ne1\tr\te9\n")
    with pytest.raises(DataError, match=r"train.tsv:2: unknown entity id 'e9'"):
        triples(TriplesSource(path=str(tmp_path)), env)
    src = TriplesSource(path=str(tmp_path), on_bad_rows="skip")
    assert triples(src, env) == [Triple("one", "r", "two")] and src.bad_rows.count == 1


def test_missing_path_is_a_data_error(tmp_path, env):
    with pytest.raises(DataError, match="does not exist"):
        TriplesSource(path=str(tmp_path / "nope.tsv")).check(env)


# -- streaming --------------------------------------------------------------------------------------- #
class Passes:
    """A triple-stream factory that counts passes and how many rows were pulled (an endless stream)."""

    def __init__(self, relations=("r1", "r2", "r3"), weights=(5, 3, 1), total=None):
        self.passes = 0
        self.pulled = 0
        self.relations, self.weights, self.total = relations, weights, total

    def __call__(self):
        self.passes += 1
        cycle = [r for r, w in zip(self.relations, self.weights) for _ in range(w)]
        counter = itertools.count() if self.total is None else range(self.total)
        for i in counter:
            self.pulled += 1
            yield Triple(f"h{i % 97}", cycle[i % len(cycle)], f"t{i}")


def test_filters_stream_lazily_without_holding_the_input():
    factory = Passes()  # endless: anything that materialises the input would never return
    out = apply_filters(factory, FilterFields(max_triples=5))
    first = next(out)
    assert factory.pulled == 1 and first.head == "h0"
    assert len(list(out)) == 4 and factory.passes == 1


def test_frequency_filters_make_exactly_two_passes():
    factory = Passes(total=900)
    out = apply_filters(factory, FilterFields(min_relation_count=200))
    next(out)
    assert factory.passes == 2  # one counting pass, then the filtering pass (streaming)
    kept = Counter(t.relation for t in itertools.chain([None], out) if t)
    assert set(kept) <= {"r1", "r2"} and "r3" not in kept


def test_min_count_top_n_keep_relations():
    f = lambda **kw: Counter(t.relation for t in apply_filters(Passes(total=900), FilterFields(**kw)))  # noqa: E731
    assert set(f(min_relation_count=300)) == {"r1"}  # r1 500, r2 300 -> "more than" 300 drops r2
    assert set(f(min_relation_count=299)) == {"r1", "r2"}
    assert set(f(min_relation_count=300 - 1, top_relations=1)) == {"r1"}
    assert set(f(top_relations=2)) == {"r1", "r2"}
    assert set(f(keep_relations=["r3"])) == {"r3"}


def test_drop_inverse_keeps_the_more_frequent_direction():
    assert "causative_agent_of" in inverse_candidates("has causative agent")
    factory = Passes(relations=("has causative agent", "causative agent of", "isa", "inverse_isa", "other"),
                     weights=(3, 2, 1, 4, 1), total=1100)
    kept = Counter(t.relation for t in apply_filters(factory, FilterFields(drop_inverse=True)))
    assert set(kept) == {"has causative agent", "inverse_isa", "other"}
    explicit = Passes(relations=("treats", "treated by"), weights=(2, 1), total=30)
    kept = {t.relation for t in apply_filters(explicit, FilterFields(drop_inverse=True,
                                                                      inverse_pairs=[["treats", "treated by"]]))}
    assert kept == {"treats"}
    assert {t.relation for t in apply_filters(Passes(relations=("treats", "treated by"), weights=(2, 1), total=30),
                                              FilterFields(drop_inverse=True))} == {"treats", "treated by"}


def test_dedupe_cap_sample_seed():
    dup = lambda: iter([Triple("a", "r", "b"), Triple("a", "r", "b"), Triple("a", "s", "b")])  # noqa: E731
    assert len(list(apply_filters(dup, FilterFields(dedupe=True)))) == 2
    assert len(list(apply_filters(dup, FilterFields()))) == 3
    long = lambda: iter([Triple("one two three four", "rel a b c", "x")])  # noqa: E731
    capped = next(apply_filters(long, FilterFields(max_node_tokens=2, max_relation_tokens=1)))
    assert (capped.head, capped.relation, capped.tail) == ("one two", "rel", "x")
    sample = lambda seed: [t.tail for t in apply_filters(Passes(total=2000), FilterFields(sample=0.25, seed=seed))]  # noqa: E731
    a, b = sample(1), sample(1)
    assert a == b and 400 < len(a) < 600 and sample(2) != a


def test_real_kg_umls_and_hsdn(data_dir, env):
    umls = triples(TriplesSource(path=str(data_dir / "kg_umls")), env)
    assert len(umls) == 5216 + 652 + 661
    assert len({t.head for t in umls} | {t.tail for t in umls}) == 135
    assert Triple("alga", "is a", "entity") in umls
    hsdn = TriplesSource(path=str(data_dir / "kg_hsdn"))
    rows = triples(hsdn, env)
    assert len(rows) == 10465 and {t.relation for t in rows} == {"has symptom"}
    assert rows[0] == Triple("Acquired Immunodeficiency Syndrome", "has symptom", "Aging, Premature",
                             pytest.approx(10.3936544686139))
