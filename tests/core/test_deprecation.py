"""The promise (kinject.deprecation, docs/plugins.md "The promise"), checked generically: a renamed public name
serves its replacement with a warning at the caller's own line, and the replacement imports; an import of a name
kinject does not have is one line; a plugin's declared kinject range is honoured."""

from __future__ import annotations

import warnings

import pytest


def test_a_renamed_name_warns_at_the_callers_line_and_serves_a_replacement_that_imports():
    from kinject.deprecation import KinjectDeprecationWarning, renamed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = __import__("inspect").currentframe().f_lineno + 1
        value = renamed("kinject.api:old_build_spec", "kinject.spec_reading:build_spec", "0.2.0")
    from kinject.spec_reading import build_spec

    assert value is build_spec
    [warning] = [w for w in caught if issubclass(w.category, KinjectDeprecationWarning)]
    assert warning.filename == __file__ and warning.lineno == line  # the caller's own line, not kinject's
    assert "kinject.spec_reading.build_spec" in str(warning.message) and "0.2.0" in str(warning.message)


def test_a_renamed_function_warns_at_each_call_site():
    from kinject.deprecation import KinjectDeprecationWarning, renamed_function

    old = renamed_function("kinject.api:old_words", "kinject.facts:words", "0.2.0")
    with pytest.warns(KinjectDeprecationWarning) as caught:
        assert old("Seizure, Eye") == ("seizure", "eye")
    assert caught[0].filename == __file__


def test_a_replacement_that_does_not_import_is_an_error_not_a_warning():
    from kinject.deprecation import renamed

    with pytest.raises((ImportError, AttributeError)):
        renamed("kinject.api:x", "kinject.facts:no_such_name", "0.2.0")


def test_an_import_of_a_name_kinject_lacks_is_one_line_and_other_errors_are_left_alone():
    from kinject.deprecation import explain_import_error

    error = ImportError("cannot import name 'usable_positons' from 'kinject.api' (/x/api.py)")
    line = explain_import_error(error)
    assert "imports usable_positons from kinject.api" in line and "docs/plugins.md#the-promise" in line
    assert "\n" not in line
    assert explain_import_error(ModuleNotFoundError("No module named 'torch9'", name="torch9")) is None
    assert explain_import_error(ValueError("x")) is None


def test_a_declared_kinject_range_is_honoured():
    from kinject.deprecation import api_mismatch

    class Dist:
        def __init__(self, *requires):
            self.requires = list(requires)

    assert api_mismatch(Dist("kinject>=0.1,<0.2", "numpy")) == ""
    assert "needs kinject<0.3,>=0.2; this is kinject" in api_mismatch(Dist("kinject>=0.2,<0.3"))
    assert api_mismatch(Dist()) == "" and api_mismatch(Dist("kinject[x]>=9; extra == 'y'")) == ""


def test_every_public_front_door_imports():
    import importlib

    from kinject.deprecation import PUBLIC

    for door in PUBLIC:
        assert importlib.import_module(door) is not None
