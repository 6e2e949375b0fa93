"""kinject's built-in tasks (registered through the ``kinject.tasks`` entry points), and the task shapes a plugin
subclasses.

Its front door: a plugin imports a shape or helper from here (``from kinject.tasks import
SequenceClassificationTask``); the modules behind it are internal. Names are imported on first use; in a stage's
key a name counts as its defining module. docs/plugins.md lists every name.
"""

from __future__ import annotations

from kinject.api import lazy_exports

_EXPORTS = {  # name -> the module defining it
    # shapes to subclass
    ".sequence": ("PairTaskConfig", "SequenceClassificationTask", "SequenceTaskConfig"),
    ".token": ("TokenClassificationTask", "TokenTaskConfig"),
    ".retrieval": ("RetrievalConfig", "RetrievalTask"),
    # readers of the data formats tasks and knowledge sources read (file:line errors, texts capped)
    ".readers": ("count_lines", "first_line", "package_folder", "progress", "read_csv_columns", "read_jsonl", "read_tsv",
                 "text_field"),  # and where the data a PyPI package ships is
    # the Human Phenotype Ontology as terms (shared with the hpo knowledge source)
    ".hpo_terms": ("HpoTerm", "hpo_data_dir", "iter_terms", "read_terms"),
    # a task's datasets as `kinject data` lists, prepares and downloads them
    ".catalogue": ("DatasetInfo",),
    # the mean over the tokens a mask keeps (bi-encoders, probes, MoP's entity states)
    ".pooling": ("masked_mean",),
    # scoring helpers the evaluators use (weighted_auroc: the knowledge probe too)
    ".evaluators.calibration": ("expected_calibration_error",),
    ".evaluators.retrieval": ("relevant_ranks",),
    ".evaluators.scores": ("softmax", "weighted_auroc"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
