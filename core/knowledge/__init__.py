"""kinject's knowledge library: knowledge sources (triples, UMLS, HPO, corpora, teacher models), KG training data
and partitioning, continued masked-LM training as public stage builders, the knowledge probe, and `kinject kg`.
Methods build on it; it builds on the kernel (:mod:`kinject.api`), the training library and the tasks.

Its front door: a method imports what it uses from here (``from kinject.knowledge import build_kg_data``);
the modules behind it (``kg.*``, ``sources.*``, ``mlm``, ``masked_lm``, ``masking``, ``packing``, ``probe``,
``default``, ``dose``, ``held_out``, ``hooks``, ``footing``, ``cli``) are internal. Names are imported on first use, so
importing the package imports none of them; in a stage's key a name counts as its defining module. docs/plugins.md lists every name.
"""

from __future__ import annotations

from kinject.api import lazy_exports

_EXPORTS = {  # name -> the module defining it
    # sources a method builds on
    ".default": ("triples_source",),
    ".sources.triples": ("TriplesSource", "TriplesSourceBase"),
    ".sources.corpus": ("CorpusSource", "HeldOutText"),
    ".sources.model": ("ModelSource",),
    ".sources.hpo": ("HpoSource",),
    # knowledge-graph training rows, batches and partitions
    ".kg.data": ("KGData", "KGDataConfig", "build_kg_data", "load_kg_data", "triple_keys", "write_kg_dose"),
    ".kg.batching": ("KGCollator", "lengths_of"),
    ".kg.intern": ("Vocab", "intern_triples"),
    ".kg.partition": ("EntityGraph", "graph_stats", "metis_parts", "partition_report", "shuffle_parts",
                      "write_partition"),
    # continued masked-LM training: stage builders and the model helpers behind them
    ".mlm": ("MaskingConfig", "mlm_stage", "mlm_training_spec"),
    ".packing": ("SEP_WORD", "mlm_model_ref", "pack_stage", "pack_to_arrow", "read_texts"),
    ".masking": ("WholeWordMaskCollator",),
    ".masked_lm": ("load_mlm", "missing_mlm_head", "sparse_prediction", "train_mlm", "transfer_embeddings"),
    # provenance of facts: what an input that is not a source (a task, a model that is a run) saw of the held-out
    ".provenance": ("filtered_task_ref", "model_input", "record", "task_input"),
    # the dose a stage consumed (dose.json), and the run's (metrics.json dose) from its stages'
    ".dose": ("combine_doses", "dose_line", "write_dose"),
    # the knowledge probe's stages, for a run the hook does not reach
    ".probe_hook": ("probe_stages",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
