"""The context strategy's config: what is handed to the model (facts, definitions) and how much of it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kinject.api import PluginConfig


class ContextConfig(PluginConfig):
    give: Literal["facts", "definitions", "both"] = Field(
        "facts", description="What each linked entity contributes: its facts from the graph (verbalised triples, "
        "'X is a Y.'), its definition (sources that have them, e.g. the HPO), or both.")
    max_entities: int = Field(4, ge=1, description="Linked entities per input, in order of appearance (the longest "
                              "name wins where names overlap).")
    max_facts: int = Field(6, ge=1, description="Facts per linked entity: the triples it heads first, then those it "
                           "is the tail of, in the graph's order.")
    max_words: int = Field(96, ge=8, description="Cap on the words of context added to one input (what follows is "
                           "cut; the model's max_length cuts again).")
    synonyms: bool = Field(True, description="Link synonyms as well as names (where the source knows them).")
    relations: list[str] | None = Field(None, description="Only facts of these relations (None: all).")
    baseline: bool = Field(True, description="Also fine-tune and evaluate the plain model (the finetune strategy's "
                           "stages, shared cache) and compare against it, paired.")
