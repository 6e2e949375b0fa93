"""Hook specifications: the lifecycle events a run announces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pluggy


hookspec = pluggy.HookspecMarker("kinject")
hookimpl = pluggy.HookimplMarker("kinject")


class HookSpecs:
    @hookspec
    def kinject_run_start(self, spec: dict, run_dir: Path) -> None:
        """A run begins. ``spec`` is the resolved spec (plain data); ``run_dir`` is being written."""

    @hookspec
    def kinject_run_end(self, spec: dict, run_dir: Path, metrics: dict[str, Any]) -> None:
        """A run finished; ``metrics`` is what metrics.json holds."""

    @hookspec
    def kinject_stage_start(self, stage: str, key: str, cached: bool) -> None:
        """A stage begins (``cached``: its output is reused, nothing will be computed)."""

    @hookspec
    def kinject_stage_end(self, stage: str, key: str, cached: bool, seconds: float) -> None:
        """A stage ended."""

    @hookspec
    def kinject_extra_stages(self, run: Any) -> list | None:
        """Stages to add to every prepared run after the strategy's own (e.g. a measurement every method gets the
        same way); called in ``prepare`` with the prepared run (``run.stages`` holds the strategy's stages)."""

    @hookspec(firstresult=True)
    def kinject_choose(self, spec: Any, announce: Any, dry_run: bool) -> tuple | None:
        """Settings a run left unset, chosen before it is prepared (e.g. by cross-validation on a small train split):
        ``(spec, record)`` - the spec to run and what was decided (run.json ``chosen``; None: nothing) - or None to
        leave the run to the next implementation. ``announce(line)`` tells the user; ``dry_run``: decide nothing
        costly, say what deciding would cost. The first implementation that answers decides
        (:func:`kinject.decisions.decide`; the training library's ``decisions`` plugin by default)."""

    @hookspec(firstresult=True)
    def kinject_start_settings(self, spec: Any) -> tuple | None:
        """The settings a run starts from, applied to the fields its spec does not set (a strategy's ``protocol``
        preset, the task's ``recommended`` values, defaults such as ``training.bf16``): ``(spec, {"protocol": {field:
        value}, "recommended": {field: value}, "defaults": {field: why}})`` (run.json ``protocol``, ``recommended``,
        ``defaults``; all announced), or None to leave it to the next implementation. Called first in ``prepare``."""

    @hookspec(firstresult=True)
    def kinject_default_rules(self, run: Any) -> dict | None:
        """Fill settings of a prepared run (``run.spec``) that nobody set; return ``{field: why}`` (run.json
        ``defaults``), or None to leave the run to the next implementation. Called in ``prepare``."""

    @hookspec(firstresult=True)
    def kinject_fold(self, examples: list, fold: tuple, held_out: bool) -> list | None:
        """Fold ``fold`` = (i, k, seed) of a train split's ``examples`` (``held_out``: fold i, a fold run's dev split;
        else the other k - 1), as the kernel applies it to every task's ``examples()`` of a ``fold`` run (the training
        library's ``decisions`` plugin: grouped, stratified). Its implementations' modules key every fold run."""

    @hookspec(firstresult=True)
    def kinject_default_exclude(self, run: Any) -> list | None:
        """The splits whose facts a run holds out of every knowledge source when its spec leaves ``knowledge.exclude``
        unset (the knowledge library's ``knowledge`` plugin: [dev, test]), or None to leave it to the next
        implementation. Called first in ``prepare``; run.json records the answer (``knowledge.exclude``) and who gave
        it (``decided_by``). No answer: nothing is held out."""

    @hookspec(firstresult=True)
    def kinject_held_out_facts(self, triples: list, files: tuple) -> Any:
        """The held-out facts (``triples``: (head, relation, tail); ``files``: fact files) as the set the engine removes
        from every source: ``len``, ``digest`` (changes with the facts and with how they are matched),
        ``blocks_triple(head, tail)``, ``strip_text(text) -> (text, statements dropped)``. The knowledge library's
        ``knowledge`` plugin matches names by their words (``HeldOutFacts``)."""

    @hookspec(firstresult=True)
    def kinject_run_dose(self, stages: list) -> dict | None:
        """The knowledge a finished run consumed (metrics.json ``dose``), from its stages' output folders (``(name,
        folder)`` in run order); None: none, or leave it to the next implementation (the knowledge library's
        ``knowledge`` plugin adds up its stages' ``dose.json``)."""

    @hookspec(firstresult=True)
    def kinject_show_section(self, console: Any, name: str, section: Any) -> bool | None:
        """Print ``section``, a part of a finished run's metrics that is not a split (e.g. ``probe``, ``dose``,
        ``comparison``; over seeds its numbers are summaries), on the rich ``console`` below the metrics table; True
        when shown, None to leave it to the next implementation (the library that writes the section shows it)."""

    @hookspec
    def kinject_check_inputs(self, run: Any) -> None:
        """Check the inputs of a prepared run that are not knowledge sources (e.g. a starting model that is itself a
        run) against the facts it holds out, before the strategy validates: refuse with a KinjectError, or record
        what each saw in ``run.inputs`` (run.json ``knowledge.inputs``)."""

    # -- the model library (the training library's ``models`` plugin; kinject.models is the kernel's side) -- #
    @hookspec(firstresult=True)
    def kinject_resolve_model(self, name: str, cache_dir: Path) -> str | None:
        """A model name -> what ``from_pretrained`` accepts (a local folder or a hub id), or None for a name this
        plugin does not know (the kernel then takes it as a local folder or a hub id)."""

    @hookspec(firstresult=True)
    def kinject_model_fingerprint(self, name: str, path: str, revision: str | None) -> str | None:
        """What identifies the weights of a model this plugin names (``ModelRef.fingerprint``, in every key), or
        None: the kernel's own (a local folder's files, a hub id at its revision)."""

    @hookspec
    def kinject_check_model(self, model: Any, path: str) -> None:
        """Check a run's model settings (``spec.model``) against the model at ``path`` before any stage: raise a
        SpecError naming the field."""

    @hookspec(firstresult=True)
    def kinject_load_model(self, model: Any, part: str) -> Any:
        """Load the ``part`` ("encoder" or "tokenizer") of the model a ``ModelRef`` names."""

    @hookspec(firstresult=True)
    def kinject_estimator(self, cache_dir: Path, bf16: bool) -> Any:
        """``--dry-run``'s time estimator for this machine and cache: ``estimator(stage_name, flops)`` (the FLOPs
        the stage states, or None) -> an object with ``seconds`` and ``how`` (a phrase); ``estimator.accuracy()`` ->
        a sentence on how far earlier estimates were off. None: no estimate."""

    @hookspec
    def kinject_metrics_logged(self, stage: str, metrics: dict[str, float], step: int | None) -> None:
        """Training or evaluation metrics were logged."""
