"""kinject's own commands, registered as any command plugin is (entry-point group ``kinject.commands``): `kinject
list` and `kinject info` (:mod:`.listing`), `kinject run` (:mod:`.run`) and `kinject doctor` (:mod:`.doctor`). Built
on the kernel's front door (:mod:`kinject.api`) only; each command sets ``rank`` so that `kinject --help` lists them
first, and `list` serves a plain call with ``fast`` before the other commands load."""
