"""Provenance of facts: which of a run's held-out facts each input that is not a knowledge source had seen.

``knowledge.exclude`` holds the task's dev/test facts out of every knowledge source; an input that is not a source
can bring them back: an intermediate task built from the same graph (STILT), a teacher (DoKTra) or a starting model
(``--model``) that is itself a kinject run trained with them. Each such input declares what it saw:

* a **task** by its examples: an example whose texts state a held-out fact (its text and text pair link the two
  names of one, or one text names both); :func:`task_input` counts them (and the task's ``Task.facts`` that are
  held out) and returns the name pairs to drop, which :func:`without_facts` (an input transform) removes from the
  task's examples wherever they are read - the principle every source follows;
* a **kinject run** (a run directory, its ``model/``, a ``seed-*`` folder or its ``model/``) by its run.json: the
  facts its own hold-out left in its knowledge when it consumed knowledge (metrics.json ``dose``), and the facts of
  its task's training items (:func:`model_input`).

An input that saw held-out facts is refused with one line (a SpecError naming the field and the count) unless the
run asks for memorisation (``knowledge.exclude: []``: nothing is held out, so the answers may reach the model by
any route); then the input is recorded with the count against the task's default hold-out (:data:`DEFAULT_EXCLUDE`)
and labelled memorisation. Every input is recorded in run.json's ``knowledge.inputs`` (:func:`record`).
"""

from __future__ import annotations

import dataclasses
import os
import logging
from pathlib import Path
from typing import Any

from kinject.api import SpecError

from kinject.api import DEFAULT_EXCLUDE, HeldOutFacts

log = logging.getLogger("kinject")

TRANSFORM = "kinject.knowledge.provenance:without_facts"


def reference_facts(run) -> tuple[HeldOutFacts, bool]:
    """(the facts the run's inputs are checked against, memorisation): the run's held-out facts; for a run that
    holds none out, its task's facts of the default splits (memorisation: the inputs may have seen them)."""
    if run.holdout is not None:
        return run.holdout.held_out(), False
    task = run.task
    if task is None:
        return HeldOutFacts(), True
    splits = [s for s in DEFAULT_EXCLUDE if s in task.eval_splits]
    env = dataclasses.replace(run.env, limit=None)
    return HeldOutFacts([(t.head, t.relation, t.tail) for s in splits for t in task.facts(s, env)]), True


def record(run, entry: dict) -> dict:
    """Add ``entry`` to the run's inputs (run.json ``knowledge.inputs``), refusing it with one line when it saw
    held-out facts of a run that holds them out; announce it when it saw any."""
    if entry["saw"] and not entry["memorisation"] and not entry.get("filtered"):
        raise SpecError(f"{entry['input']}: {entry['what']} saw {entry['saw']} of this run's {entry['held_out']} "
                        f"held-out facts ({entry['how']}); use one that held them out, or set knowledge.exclude=[] "
                        "to run it as memorisation")
    if entry["saw"]:
        done = "filtered out" if entry.get("filtered") else "kept: memorisation (knowledge.exclude [])"
        log.info("%s: %s saw %d of the task's %d dev/test facts (%s); %s", entry["input"], entry["what"],
                 entry["saw"], entry["held_out"], entry["how"], done)
    run.inputs.append(entry)
    return entry


# -- tasks ------------------------------------------------------------------------------------------------ #
def example_states(facts: HeldOutFacts, example: dict) -> tuple | None:
    """The held-out name pair ``example`` states (its text and text pair link the two names of a held-out fact,
    or one of its texts names both), else None."""
    texts = [t for t in (example.get("text"), example.get("text_pair")) if isinstance(t, str)]
    if len(texts) == 2:
        pair = facts.pair_of(*texts)
        if pair is not None:
            return pair
    for text in texts:
        pair = facts.pair_in(text)
        if pair is not None:
            return pair
    return None


def task_input(run, task, field: str, splits: tuple[str, ...] | None = None) -> tuple[dict, list[list[str]]]:
    """What an input task (e.g. a STILT intermediate) saw of the run's held-out facts, over the splits it trains
    and selects on (default: its train split and ``dev`` where it has one), and the name pairs to filter out of its
    examples (none for a memorisation run). Recorded in run.json by :func:`record`."""
    facts, memorisation = reference_facts(run)
    env = dataclasses.replace(run.env, limit=None)
    splits = splits or (task.train_split, *[s for s in task.eval_splits if s == "dev"])
    pairs, examples = set(), 0
    if len(facts):
        for split in splits:
            for example in task.examples(split, env):
                pair = example_states(facts, example)
                if pair is not None:
                    pairs.add(pair)
                    examples += 1
        declared = {facts.pair_of(t.head, t.tail) for s in splits for t in task.facts(s, env)} - {None}
        pairs |= declared
    entry = {"input": field, "what": f"task {task.name!r}", "kind": "task", "task": task.name,
             "splits": list(splits), "held_out": len(facts), "saw": len(pairs), "examples": examples,
             "how": f"{examples} labelled example(s) of its {'/'.join(splits)} split(s) state them",
             "memorisation": memorisation, "filtered": bool(pairs) and not memorisation}
    drop = sorted([" ".join(a), " ".join(b)] for a, b in map(facts.pair_names, pairs)) if entry["filtered"] else []
    return entry, drop


def without_facts(examples: list[dict], split: str, env: Any, transform) -> list[dict]:
    """The input transform of a filtered task: its examples less those that state one of ``options.pairs``."""
    facts = HeldOutFacts([(a, "", b) for a, b in transform.options["pairs"]])
    return [example for example in examples if example_states(facts, example) is None]


def filtered_task_ref(ref, drop: list[list[str]]):
    """A TaskRef whose examples stating the facts ``drop`` names are filtered out (``ref`` itself when none)."""
    if not drop:
        return ref
    from kinject.api import InputTransform

    return ref.with_inputs(InputTransform(function=TRANSFORM, options={"pairs": drop}))


# -- models that are kinject runs --------------------------------------------------------------------------- #
def run_folder_of(path: str | Path) -> Path | None:
    """The kinject run folder a model path belongs to (the folder itself, or the one above its ``model/``: a run,
    or one seed's folder of a run over seeds), else None."""
    local = Path(str(path)).expanduser()
    if not local.is_dir():  # a named model (minilm, tiny) or a hub id
        return None
    for folder in (local, local.parent):
        if os.path.lexists(folder / "run.json"):  # whatever it is: a damaged one is refused, not passed over
            return folder
    return None


def _task_of(spec: dict, run):
    """The task a recorded run used (from its run.json spec), None when its plugin is not installed."""
    from kinject.api import KinjectError, registry

    data = dict(spec.get("task") or {})
    name = data.pop("name", None)
    if not name:
        return None
    try:
        cls = registry("tasks").get(name)
        return cls(cls.Config.model_validate(data))
    except (KinjectError, ValueError):
        return None


def _facts_of(task, splits, env) -> HeldOutFacts:
    return HeldOutFacts([(t.head, t.relation, t.tail) for s in splits for t in task.facts(s, env)])


def _own_hold_out(task, held: dict, env) -> HeldOutFacts:
    """The facts a recorded run held out (its run.json ``knowledge.held_out``), rebuilt from its task and file."""
    from kinject.api import HoldOutRef

    splits = held.get("splits") or []
    file = held.get("file") if held.get("file") and Path(held["file"]).is_file() else None
    if (task is None or not splits) and file is None:
        return HeldOutFacts()
    ref = HoldOutRef.of(task if splits else None, env, list(splits), file)
    return ref.held_out() if ref is not None else HeldOutFacts()


def model_input(run, path: str | Path, field: str) -> dict | None:
    """What a model that is a kinject run saw of the run's held-out facts (None: not a kinject run, nothing
    declared): the facts its own hold-out did not cover, when it consumed knowledge, and its task's train/dev
    facts. Recorded in run.json (a refusal when it saw some and the run holds them out) by :func:`record`."""
    folder = run_folder_of(path)
    if folder is None:
        return None
    from kinject.api import DataError, read_run

    try:
        info, metrics = read_run(folder)  # an input: damaged is refused, in one line naming the file
    except DataError as exc:
        raise SpecError(f"{field}: a damaged kinject run: {exc}") from None
    facts, memorisation = reference_facts(run)
    knowledge = info.get("knowledge") or {}
    dose = metrics.get("dose")
    spec = info.get("spec") or {}
    task = _task_of(spec, run)
    env = dataclasses.replace(run.env, limit=None, seed=info.get("seed", run.env.seed))
    seen: set = set()
    how = []
    if len(facts) and (dose or spec.get("sources")):  # it consumed knowledge: what did its hold-out leave in?
        held = knowledge.get("held_out") or {}
        if held.get("digest") != facts.digest:
            left = facts.pairs - _own_hold_out(task, held, env).pairs
            seen |= left
            how.append(f"its knowledge held out {held.get('facts') or 0} facts "
                       f"(knowledge.exclude {knowledge.get('exclude', [])}), leaving {len(left)} of these in")
    if len(facts) and task is not None:  # its training items (its dev selection is what every run does)
        labelled = _facts_of(task, [task.train_split], env).pairs & facts.pairs
        if labelled:
            seen |= labelled
            how.append(f"{len(labelled)} are labelled items of its task's {task.train_split} split")
    entry = {"input": field, "what": f"kinject run {folder}", "kind": "run", "path": str(path), "run": str(folder),
             "task": (spec.get("task") or {}).get("name"), "exclude": knowledge.get("exclude"),
             "held_out": len(facts), "saw": len(seen), "how": "; ".join(how) or "none of them",
             "memorisation": memorisation}
    return entry
