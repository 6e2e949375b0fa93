"""kinject.io's atomic writes: nothing half-written, nothing left behind, a finished target wins a race."""

from __future__ import annotations

import pytest

from kinject.files import atomic_directory, atomic_file, atomic_write_text


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_atomic_directory_renames_on_success_and_removes_on_error(tmp_path):
    target = tmp_path / "deep" / "out"
    with atomic_directory(target) as tmp:
        assert tmp.parent == target.parent and tmp.is_dir() and not target.exists()
        (tmp / "a.txt").write_text("a")
    assert (target / "a.txt").read_text() == "a" and not leftovers(target.parent)
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(tmp_path / "other") as tmp:
            (tmp / "b.txt").write_text("half")
            raise KeyboardInterrupt  # any exception, not only Exception
    assert not (tmp_path / "other").exists() and not leftovers(tmp_path)


def test_atomic_directory_race_and_replace(tmp_path):
    target = tmp_path / "key"
    with atomic_directory(target) as tmp:
        (tmp / "mine.txt").write_text("mine")
        target.mkdir()  # another process finished the same target first
        (target / "theirs.txt").write_text("theirs")
    assert [p.name for p in target.iterdir()] == ["theirs.txt"] and not leftovers(tmp_path)
    with atomic_directory(target, replace=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new.txt"] and not leftovers(tmp_path)


def test_atomic_file_and_text(tmp_path):
    path = tmp_path / "sub" / "f.json"
    atomic_write_text(path, "one")
    assert path.read_text() == "one"
    with pytest.raises(ValueError):
        with atomic_file(path) as tmp:
            tmp.write_text("two, half")
            raise ValueError("crash")
    assert path.read_text() == "one" and not leftovers(path.parent)
    with atomic_file(path) as tmp:
        tmp.write_text("three")
    assert path.read_text() == "three" and not leftovers(path.parent)
