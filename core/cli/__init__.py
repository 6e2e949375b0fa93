"""kinject's front ends, on the kernel's front door (:mod:`kinject.api`) only: the `kinject` program (:mod:`.app`,
the console script), kinject's own commands, registered as any command plugin is (entry-point group
``kinject.commands``) - `kinject list` and `kinject info` (:mod:`.listing`, with :mod:`.describe`: what a listing
says of a plugin without importing it), `kinject run` (:mod:`.run`) and `kinject doctor` (:mod:`.doctor`) - and
``kinject.run`` / ``kinject.load`` (:mod:`.python`, the `run` command's Python side). Each command sets ``rank`` so
that `kinject --help` lists them first, and `list` serves a plain call with ``fast`` before the other commands load."""

UNKEYED = "*"  # the command line: no stage key follows it (kinject.fingerprint)
