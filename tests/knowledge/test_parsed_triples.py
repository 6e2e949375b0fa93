"""A triples source is parsed once: the raw triples kept as Arrow in the cache, keyed by the source's files and reading
settings (not its filters), give exactly the triples, order and weights a parse gives; a pass that stops early or
fails keeps nothing; bad rows skipped are counted again; a damaged kept file is parsed again."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinject.api import DataError, Environment
from kinject.knowledge import TriplesSource


def env(cache: Path | None) -> Environment:
    return Environment(data_dir=Path("."), cache_dir=cache or Path("."))


def kept(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "triples").glob("*.arrow")) if (cache / "triples").is_dir() else []


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "kg.tsv"
    path.write_text("".join(f"head {i}\trel {i % 3}\ttail {i * 7 % 11}\t{0.5 + i}\n" for i in range(120))
                    + "a broken row\n")
    return path


def test_the_kept_parse_gives_the_same_triples_as_parsing(table, tmp_path):
    source = TriplesSource(path=str(table), on_bad_rows="skip", sample=0.5, seed=3)
    parsed = list(source.iter_triples(env(None)))
    assert source.bad_rows.count == 1 and len(parsed) < 120
    cache = tmp_path / "cache"
    first = list(source.iter_triples(env(cache)))  # parsed, kept as it streams
    assert len(kept(cache)) == 1
    again = list(source.iter_triples(env(cache)))  # read back
    assert parsed == first == again and source.bad_rows.count == 1
    other = TriplesSource(path=str(table), on_bad_rows="skip", sample=0.9, seed=1)  # other filters: the same parse
    assert other.parse_digest(env(cache)) == source.parse_digest(env(cache))
    assert list(other.iter_triples(env(cache))) == list(other.iter_triples(env(None))) and len(kept(cache)) == 1


def test_what_the_parse_depends_on_keys_it(table, tmp_path):
    cache = tmp_path / "cache"
    skip = TriplesSource(path=str(table), on_bad_rows="skip")
    list(skip.iter_triples(env(cache)))
    strict = TriplesSource(path=str(table))  # a bad row's policy is part of the parse: this one raises
    assert strict.parse_digest(env(cache)) != skip.parse_digest(env(cache))
    with pytest.raises(DataError, match=r"kg\.tsv:121"):
        list(strict.iter_triples(env(cache)))
    assert len(kept(cache)) == 1  # the failed pass kept nothing
    before = skip.parse_digest(env(cache))
    table.write_text(table.read_text().replace("head 5\t", "head five\t"))
    assert skip.parse_digest(env(cache)) != before
    assert any(t.head == "head five" for t in skip.iter_triples(env(cache)))


def test_a_pass_that_stops_early_keeps_nothing_and_a_damaged_file_is_parsed_again(table, tmp_path, caplog):
    cache = tmp_path / "cache"
    source = TriplesSource(path=str(table), on_bad_rows="skip")
    stream = source.iter_triples(env(cache))
    next(stream)
    stream.close()
    assert kept(cache) == [] and not list((cache / "triples").glob(".*partial*"))
    expected = list(source.iter_triples(env(cache)))
    (arrow,) = (cache / "triples").glob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[:100])  # cut short
    assert list(source.iter_triples(env(cache))) == expected
    assert "parsing the source again" in caplog.text and len(kept(cache)) == 1
