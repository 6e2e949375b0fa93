"""``python -m kinject``: the `kinject` program, whichever package the distribution's console script names."""

from importlib.metadata import entry_points

if __name__ == "__main__":
    (program,) = entry_points(group="console_scripts", name="kinject")
    program.load()()
