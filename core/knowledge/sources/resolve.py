"""Turn a command-line SOURCE (a registered source name, or a path to triples) plus ``--set k=v`` into a source."""

from __future__ import annotations

from pathlib import Path

from kinject.api import KnowledgeSource, SpecError, UnknownNameError, registry


def open_source(source: str, sets: list[str] | None = None) -> KnowledgeSource:
    """``hpo``, ``umls --set path=META`` or ``path/to/triples.tsv`` (a file or folder -> ``triples``)."""
    from kinject.api import PluginRef, validate_plugin_config
    from kinject.api import apply_overrides

    options = apply_overrides({}, sets or [])
    names = registry("sources").names()
    if source in names:
        name = source
    elif Path(source).expanduser().exists():
        name = "triples"
        if "path" in options:
            raise SpecError("path: given twice (as SOURCE and as --set path=...)")
        options["path"] = str(Path(source).expanduser())
    else:
        error = registry("sources").unknown(source)
        raise UnknownNameError(f"SOURCE {source!r} is neither a file/folder nor a source name. {error}")
    cls = registry("sources").get(name)
    return cls(validate_plugin_config(cls, PluginRef(name=name, **options), name))
