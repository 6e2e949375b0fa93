"""Linking input texts to a knowledge graph and verbalising what the graph says about what they name.

:class:`EntityIndex` reads a source once: every entity's name (and, where the source knows them, synonyms and a
definition) and the triples it takes part in. :meth:`EntityIndex.link` finds the names in a text (whole words,
case-folded, longest match first, no overlaps); :func:`add_context` is the input transform that hands the facts to
the model beside each input (``kinject.api.InputTransform``)."""

from __future__ import annotations

from typing import Any

from kinject.api import HeldOutSource, words

MAX_NAME_WORDS = 10  # longer names are linked by exact match only when they fit this many words


class EntityIndex:
    """Names -> entity, entity -> facts ((head, relation, tail) in graph order) and definitions."""

    def __init__(self, source: Any, env: Any, synonyms: bool = True, relations: list[str] | None = None):
        self.names: dict[tuple[str, ...], str] = {}
        self.heads: dict[str, list[tuple[str, str, str]]] = {}
        self.tails: dict[str, list[tuple[str, str, str]]] = {}
        self.definitions: dict[str, str] = {}
        keep = set(relations) if relations else None
        for triple in source.iter_triples(env):
            if keep is not None and triple.relation not in keep:
                continue
            fact = (triple.head, triple.relation, triple.tail)
            self.heads.setdefault(triple.head, []).append(fact)
            self.tails.setdefault(triple.tail, []).append(fact)
            for name in (triple.head, triple.tail):
                self._name(name, name)
        held = source.facts if isinstance(source, HeldOutSource) else None
        for name, alternatives, definition in source.entity_texts(env):
            if name not in self.heads and name not in self.tails:
                continue
            for other in alternatives if synonyms else ():
                self._name(other, name)
            if definition and not (held is not None and held.blocks_text(f"{name} {definition}")):
                self.definitions[name] = definition
        self.first = {key[0] for key in self.names}

    def _name(self, text: str, entity: str) -> None:
        key = words(text)
        if key and len(key) <= MAX_NAME_WORDS:
            self.names.setdefault(key, entity)

    def link(self, text: str) -> list[str]:
        """The entities ``text`` names, in order of appearance (each once)."""
        tokens = words(text)
        found: list[str] = []
        i = 0
        while i < len(tokens):
            match = None
            if tokens[i] in self.first:
                for n in range(min(MAX_NAME_WORDS, len(tokens) - i), 0, -1):
                    entity = self.names.get(tokens[i:i + n])
                    if entity is not None:
                        match = (n, entity)
                        break
            if match:
                if match[1] not in found:
                    found.append(match[1])
                i += match[0]
            else:
                i += 1
        return found

    def facts(self, entity: str, limit: int) -> list[tuple[str, str, str]]:
        return (self.heads.get(entity, []) + self.tails.get(entity, []))[:limit]


def verbalise(fact: tuple[str, str, str]) -> str:
    return f"{fact[0]} {fact[1]} {fact[2]}."


def context_for(index: EntityIndex, texts: list[str], options: dict) -> tuple[list[str], list[tuple[str, str, str]]]:
    """(sentences, facts) handed to the model for an input made of ``texts``, within the caps of ``options``."""
    entities: list[str] = []
    for text in texts:
        entities += [e for e in index.link(text) if e not in entities]
    sentences: list[str] = []
    facts: list[tuple[str, str, str]] = []
    budget = options["max_words"]
    for entity in entities[: options["max_entities"]]:
        items: list[tuple[str, tuple | None]] = []
        if options["give"] in ("definitions", "both") and entity in index.definitions:
            items.append((f"{entity}: {index.definitions[entity]}", None))
        if options["give"] in ("facts", "both"):
            items += [(verbalise(f), f) for f in index.facts(entity, options["max_facts"]) if f not in facts]
        for sentence, fact in items:
            count = len(sentence.split())
            if count > budget:
                return sentences, facts
            budget -= count
            sentences.append(sentence)
            if fact is not None:
                facts.append(fact)
    return sentences, facts


_INDEX: dict[tuple, EntityIndex] = {}


def entity_index(transform, env) -> EntityIndex:
    """The index of the transform's source, built once per process and source (hold-out included)."""
    ref = transform.sources[0]
    options = transform.options
    key = (ref.fingerprint, ref.holdout.digest if ref.holdout else "", options["synonyms"],
           tuple(options["relations"] or ()))
    if key not in _INDEX:
        _INDEX.clear()
        _INDEX[key] = EntityIndex(ref.build(), ref.environment_for(env), options["synonyms"], options["relations"])
    return _INDEX[key]


def add_context(examples: list[dict], split: str, env: Any, transform) -> list[dict]:
    """The input transform: each example's text (and text pair) linked to the graph, what the graph says about the
    entities appended to its second segment (a single text gets one), and recorded as ``context`` (the facts, so
    the prediction records show them) and ``context_facts`` ((head, relation, tail), for the dose)."""
    index = entity_index(transform, env)
    out = []
    for example in examples:
        texts = [t for t in (example.get("text"), example.get("text_pair")) if isinstance(t, str)]
        sentences, facts = context_for(index, texts, transform.options)
        added = " ".join(sentences)
        pair = example.get("text_pair")
        if isinstance(pair, str) and pair:
            pair = f"{pair} ; {added}" if added else pair
        else:  # a single text: the context is its second segment (empty when nothing links)
            pair = added
        out.append({**example, "text_pair": pair, "context": sentences, "context_facts": facts})
    return out
