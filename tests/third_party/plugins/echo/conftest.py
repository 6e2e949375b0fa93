"""kinject's fixtures for this package's tests: the tiny model, a textcls data folder, a temporary cache and
in-process registration (docs/plugin-reference.md, "Testing a plugin package")."""

pytest_plugins = ["kinject.testing"]
