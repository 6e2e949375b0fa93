"""The context strategy's config: what is handed to the model (facts, definitions) and how much of it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kinject.api import PluginConfig


class ContextConfig(PluginConfig):
    form: Literal["text", "lookup"] = Field(
        "text", description="How the facts reach the prediction: text (each input's linked facts as text beside "
        "it, then fine-tuning) or lookup (the ceiling: the graph's answer where it links the pair's two texts, the "
        "fine-tuned baseline's prediction elsewhere; needs a pair task).")
    lookup_label: str = Field("yes", description="form=lookup: the label of a pair the graph links (hpo-isa: yes).")
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
