"""The model card of a run: README.md with the Hub's metadata (``huggingface_hub.ModelCardData``: library, tags, base
model, datasets, pipeline tag, ``model-index``) over a body written from run.json, metrics.json and probe.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .provenance import _local, base_model, dataset_of, model_label, reproduce_command

#: kinject's metric names -> the metric ids the Hub's model-index understands (kinject's name stays the display name)
HUB_METRICS = {"accuracy": "accuracy", "f1": "f1", "f1_micro": "f1", "f1_macro": "f1", "f1_weighted": "f1",
               "entity_f1": "f1", "precision": "precision", "recall": "recall", "pearson": "pearsonr",
               "auroc_macro": "roc_auc", "auroc_micro": "roc_auc", "auroc_weighted": "roc_auc", "mrr": "mrr",
               "ece": "ece"}
#: metrics.json entries that are not evaluation splits
NOT_SPLITS = ("train", "comparison", "probe", "dose", "corpus", "mlm", "perplexity")
#: what the folders a strategy shares by convention hold (Strategy.shared_files)
FOLDERS = {"adapters/": "adapters as the strategy's knowledge stages trained them, one folder each",
           "fusion/": "the fusion layer that mixes the adapters in the task model",
           "finetuned-adapters/": "the adapters as the task model holds them (they trained with the task)"}
PIPELINES = {"token": ("token-classification", "Token Classification"),
             "sequence": ("text-classification", "Text Classification"),
             "retrieval": ("text-ranking", "Text Ranking")}


def read_json(path: Path) -> dict:
    """A run file as a dict ({} when absent), read as user input is (:func:`kinject.api.read_record`: a regular file,
    bounded, a JSON object); a damaged one is one line naming it."""
    import os

    from kinject.api import DataError, read_record

    if not os.path.lexists(path):
        return {}
    try:
        return read_record(path)
    except DataError as exc:
        raise DataError(f"{exc.reason}; nothing is pushed", path) from None


def run_files(run_dir: Path) -> tuple[dict, dict]:
    """(run.json, metrics.json) of the run a card is written from, read and schema-checked as every run folder kinject
    reads as an input (:func:`kinject.api.read_run`); a damaged one is one line naming it."""
    from kinject.api import DataError, read_run

    try:
        return read_run(run_dir)
    except DataError as exc:
        raise DataError(f"{exc.reason}; nothing is pushed", exc.path) from None


# -- text from a run's files in the card's markdown ------------------------------------------------------------ #
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MARKUP = re.compile(r"[\\`*\[\]<>|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")  # an intraword _ is no markup


def _plain(text) -> str:
    """``text`` on one line: control characters (line breaks, escapes) shown as escapes (``\\n``, ``\\x1b``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def md(text) -> str:
    """``text`` from a run's files as plain text in the card's markdown: one line, every markup character escaped."""
    return _MARKUP.sub(lambda m: "\\" + m.group(), _plain(text))


def code(text) -> str:
    """``text`` as an inline code span it cannot end early: one line, a fence longer than any run of backticks in
    it, ``|`` escaped for tables."""
    text = _plain(text).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def task_kind(info: dict, files: dict[str, Path]) -> str:
    """``token``, ``retrieval`` or ``sequence``: from the saved model's architecture and the task class."""
    config = files.get("config.json")
    architectures = (read_json(config).get("architectures") or []) if config else []
    if any(a.endswith("ForTokenClassification") for a in architectures):
        return "token"
    try:
        from kinject.api import registry
        from kinject.tasks import RetrievalTask

        if issubclass(registry("tasks").get(info["spec"]["task"]["name"]), RetrievalTask):
            return "retrieval"
    except Exception:  # a task plugin not installed here: the architecture decides
        pass
    return "sequence"


def split_metrics(metrics: dict, finite: bool = False) -> dict[str, dict[str, float]]:
    """split -> {metric: value} of the evaluated splits in metrics.json (numbers only; ``finite``: not NaN or inf)."""
    import math

    return {split: {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                    and (not finite or math.isfinite(v))}
            for split, values in metrics.items() if split not in NOT_SPLITS and isinstance(values, dict)}


def not_finite(metrics: dict) -> list[str]:
    """``split.metric`` of every NaN or infinite value of the evaluated splits (left out of the model-index)."""
    finite = split_metrics(metrics, finite=True)
    return [f"{split}.{name}" for split, values in split_metrics(metrics).items() for name in values
            if name not in finite[split]]


def card_data(info: dict, metrics: dict, repo_id: str, files: dict[str, Path],
              license: str | None = None) -> ModelCardData:
    """The card's YAML metadata, with one ``model-index`` result per evaluated split and finite metric."""
    spec = info.get("spec", {})
    strategy = (spec.get("strategy") or {}).get("name", "?")
    pipeline, task_title = PIPELINES[task_kind(info, files)]
    name_of_data, dataset, config = dataset_of(info)
    results = [EvalResult(task_type=pipeline, task_name=task_title, dataset_type=dataset, dataset_name=name_of_data,
                          dataset_config=config, dataset_split=split, metric_type=hub_metric(name), metric_name=name,
                          metric_value=round(float(value), 6))
               for split, values in split_metrics(metrics, finite=True).items() for name, value in values.items()]
    adapters = any(path.startswith(("adapters/", "fusion/")) for path in files)
    base = base_model(info)
    dataset = dataset if dataset != "custom" else None
    return ModelCardData(library_name="transformers", base_model=base, pipeline_tag=pipeline, language=["en"],
                         license=license, tags=["kinject", strategy, "biomedical",
                                                                 *(["adapters"] if adapters else [])],
                         datasets=[dataset] if dataset else None, model_name=repo_id.split("/")[-1],
                         eval_results=results or None)


def hub_metric(name: str) -> str:
    """The Hub's id for a kinject metric name (recall@k -> recall; unknown names stay as they are)."""
    return HUB_METRICS.get(name, "recall" if name.startswith("recall@") else name)


def model_card(run_dir: Path, repo_id: str, files: dict[str, Path], license: str | None = None) -> ModelCard:
    """The card of the run in ``run_dir`` published as ``repo_id`` with ``files`` (repo path -> local file) under
    ``license`` (the Hub's licence id)."""
    info, metrics = run_files(run_dir)
    probe = read_json(run_dir / "probe.json") or flat_probe(metrics.get("probe"))  # probe.json has model/base
    data = card_data(info, metrics, repo_id, files, license)
    body = "\n".join(part for part in (
        summary(info, repo_id), setup_section(info), smoke_section(info), learned_section(run_dir),
        results_section(metrics),
        comparison_section(metrics),
        probe_section(probe), usage_section(repo_id, files, own_loader(info)), files_section(files),
        reproduce_section(info, run_dir)) if part)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


# -- the body's sections ---------------------------------------------------------------------------------------- #
class Prose(str):
    """A table value shown as text, markdown already (its parts from a run's files through :func:`md` or
    :func:`code`); others are shown as code."""


def _value(value) -> str:
    if isinstance(value, Prose):
        return str(value)  # (written with md/code)
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() and abs(value) >= 1000 else f"{value:.4g}"
    return code(json.dumps(value) if isinstance(value, (dict, list)) else str(value))


def _table(rows: dict, header: tuple[str, str] = ("setting", "value")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {md(key)} | {_value(value)} |" for key, value in rows.items()]
    return "\n".join(lines) + "\n"


def _strategy_doc(name: str) -> str:
    try:
        from kinject.api import registry

        return ((registry("strategies").get(name).__doc__ or "").strip().splitlines() or [""])[0]
    except Exception:  # not installed here: the card still names it
        return ""


def arm_label(strategy: dict) -> str:
    """The arm's name for a run's ``spec.strategy`` (name and settings), where run.json has no ``arm`` (an older
    run): the strategy's ``label`` of its config
    (``kimera``, ``kimera/no-mask``, ``mop/names``), else its name (a strategy without one, not installed here,
    or settings it no longer reads)."""
    name = str(strategy.get("name") or "?")
    try:
        from kinject.api import registry

        cls = registry("strategies").get(name)
        label = getattr(cls, "label", None)
        if label is None:
            return name
        return str(label(cls.Config.model_validate({k: v for k, v in strategy.items() if k != "name"})))
    except Exception:  # not installed here, or a config this version does not read: the name still says which
        return name


def summary(info: dict, repo_id: str) -> str:
    spec = info.get("spec", {})
    strategy = (spec.get("strategy") or {}).get("name", "?")
    label = str(info.get("arm") or arm_label(spec.get("strategy") or {}))
    task = (spec.get("task") or {}).get("name", "?")
    doc = _strategy_doc(strategy).rstrip(".")
    hub = base_model(info)
    base = f"[{code(hub)}](https://huggingface.co/{md(hub)})" if hub else code(model_label(info))
    how = f" ({md(doc)})" if doc else ""
    arm = f" as {code(label)}" if label != strategy else ""
    return (f"# {md(repo_id.split('/')[-1])}\n\n{base} trained with kinject's {code(strategy)} strategy{how}{arm} "
            f"on the {code(task)} task.\n")


def sources_text(info: dict) -> Prose:
    """The knowledge the run was given: each configured source with its settings, else the strategy's default."""
    spec = info.get("spec", {})
    sources = spec.get("sources") or []
    if not sources:
        try:
            from kinject.api import registry

            consumes = set(registry("strategies").get(spec["strategy"]["name"]).consumes)
        except Exception:  # not installed here
            consumes = {"?"}
        if not consumes:
            return Prose("none (the strategy reads no knowledge source)")
        default = " (kinject's embedded Human Phenotype Ontology graph)" if consumes == {"triples"} else ""
        return Prose(f"none configured: the strategy's default{default}")
    parts = []
    for source in sources:
        settings = {k: v for k, v in source.items() if k != "name" and v != _default("sources", source["name"], k)}
        parts.append(f"{code(source['name'])} ({md(', '.join(f'{k}={v}' for k, v in settings.items()))})")
    return Prose("; ".join(parts))


def _default(kind: str, name: str, field: str):
    """A plugin config field's default (a marker that equals nothing when unknown: the value is then shown)."""
    try:
        from kinject.api import registry

        info = registry(kind).get(name).Config.model_fields[field]
        return info.get_default(call_default_factory=True) if not info.is_required() else _UNKNOWN
    except Exception:  # not installed here, or no such field
        return _UNKNOWN


_UNKNOWN = object()


def setup_section(info: dict) -> str:
    spec = info.get("spec", {})
    model = spec.get("model") or {}
    name = (spec.get("task") or {}).get("name")
    task = {k: v for k, v in (spec.get("task") or {}).items() if k != "name" and v != _default("tasks", name, k)}
    training = spec.get("training") or {}
    rows = {"base model": model_label(info), "model settings":
            {k: v for k, v in model.items() if k != "name" and v is not None},
            "strategy": (spec.get("strategy") or {}).get("name"), "arm": str(info.get("arm") or arm_label(spec.get("strategy") or {})),
            "knowledge": sources_text(info),
            "task": name, "task options": _local(task), "data": _local(info.get("data")),
            "seed": info.get("seed", spec.get("seed"))}
    if training.get("limit"):
        rows["limit"] = Prose(f"trained and evaluated on the first {md(training['limit'])} examples per split")
    text = "## Setup\n\n" + _table({k: v for k, v in rows.items() if v not in (None, {})})
    strategy = {k: v for k, v in (spec.get("strategy") or {}).items() if k != "name"}
    if strategy:
        text += f"\n### Strategy settings ({code(spec['strategy']['name'])})\n\n" + _table(strategy)
    if training:
        text += "\n### Training settings\n\n" + _table(training)
    return text


def results_section(metrics: dict) -> str:
    splits = split_metrics(metrics)
    if not splits:
        return ""
    names = list(dict.fromkeys(name for values in splits.values() for name in values))
    lines = ["## Results\n", "| split | " + " | ".join(map(md, names)) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {md(split)} | " + " | ".join(f"{values[n]:.4f}" if n in values else "" for n in names) + " |"
              for split, values in splits.items()]
    train = metrics.get("train") or {}
    kept = {k: train[k] for k in ("train_loss", "global_step", "epoch", "trainable_parameters") if k in train}
    if kept:
        lines.append("\nTraining: " + ", ".join(f"{k} {md(v if isinstance(v, str) else _value(v).strip('`'))}"
                                                 for k, v in kept.items()) + ".")
    return "\n".join(lines) + "\n"


def smoke_section(info: dict) -> str:
    """A warning when the run is a smoke run (the tiny model, ``--limit``, a few steps): its figures are not
    comparable with anyone's (kinject's evidence library's check, as every report and figure shows it)."""
    from kinject.evidence import smoke_of

    found = smoke_of(info)
    return f"> **{md(found[0].upper() + found[1:])}.** Its scores below test the machinery, not the method.\n" \
        if found else ""


def learned_section(run_dir: Path) -> str:
    """A warning when the model learned nothing on test (kinject's evidence library's check: a constant predictor,
    or a score that does not beat the best input-free predictor for the metric)."""
    from kinject.evidence import run_not_learned

    flag = run_not_learned(run_dir)
    if not flag:
        return ""
    return (f"> **Not learned.** On the test split: {md(flag['reason'])}. Its scores below are not "
            "evidence about the method that trained it.\n")


def comparison_section(metrics: dict) -> str:
    found = metrics.get("comparison")
    found = [found] if isinstance(found, dict) else [c for c in found or [] if isinstance(c, dict)]
    if not found:
        return ""
    lines = ["## Compared with the baseline\n",
             "Paired over the same examples (same seed and data): the difference and its bootstrap interval, as "
             "`kinject compare` reports them.\n",
             "| split | metric | baseline | this model | difference | interval (examples only: one seed) | examples "
             "| verdict |", "|---" * 8 + "|"]
    for c in found:

        def number(key: str, sign: str = "") -> str:
            value = c.get(key)
            return f"{value:{sign}.4f}" if isinstance(value, (int, float)) else "?"

        confidence = c.get("confidence") if isinstance(c.get("confidence"), (int, float)) else 0.95
        interval = (f"{round(100 * confidence)}% [{number('ci_low', '+')}, {number('ci_high', '+')}] "
                    f"({md(c.get('method', 'percentile'))}, {md(c.get('n_resamples', '?'))} resamples)")
        lines.append(f"| {md(c.get('split', 'test'))} | {md(c.get('metric'))} | {md(c.get('baseline_name', 'baseline'))} "
                     f"{number('baseline')} | {md(c.get('other_name', ''))} {number('other')} | "
                     f"{number('difference', '+')} | {interval} | {md(c.get('n', '?'))} | {md(c.get('verdict', '-'))} |")
    return "\n".join(lines) + "\n"


def flat_probe(section) -> dict | None:
    """probe.json's shape from metrics.json's flat ``probe`` section (auroc, base_auroc, ...), for a run folder
    without probe.json."""
    if not isinstance(section, dict):
        return None
    measures = [m for m in ("auroc", "accuracy") if isinstance(section.get(m), (int, float))
                and isinstance(section.get(f"base_{m}"), (int, float))]
    if not measures:
        return None
    out = {"model": {m: section[m] for m in measures}, "base": {m: section[f"base_{m}"] for m in measures},
           "chance": section.get("chance", 0.5)}
    if isinstance(section.get("gain_auroc_low"), (int, float)):
        out["gain_ci"] = {"auroc": [section["gain_auroc_low"], section["gain_auroc_high"]]}
    return out


def probe_section(probe: dict | None) -> str:
    if not probe or not isinstance(probe.get("model"), dict) or not isinstance(probe.get("base"), dict):
        return ""
    measures = [m for m in ("auroc", "accuracy") if m in probe["model"] and m in probe["base"]]
    chance = probe.get("chance", 0.5)
    lines = ["## Knowledge probe\n", "Did the knowledge go in? A logistic-regression probe on the frozen encoder's "
             f"embeddings of held-out ontology facts, the same for every strategy (chance {chance}).\n",
             "| | " + " | ".join(measures) + " |", "|---" * (len(measures) + 1) + "|"]
    for side in ("model", "base"):
        lines.append(f"| {'this model' if side == 'model' else 'base model'} | "
                     + " | ".join(f"{probe[side][m]:.4f}" for m in measures) + " |")
    lines.append("| gain | " + " | ".join(f"{probe['model'][m] - probe['base'][m]:+.4f}" for m in measures) + " |")
    interval = (probe.get("gain_ci") or {}).get("auroc")
    if interval and all(isinstance(v, (int, float)) for v in interval):
        lines.append(f"\nThe AUROC gain's 95% bootstrap interval over probe-test facts: [{interval[0]:+.4f}, "
                     f"{interval[1]:+.4f}].")
    facts = probe.get("facts") or {}
    if facts:
        kind = facts.get("kind")
        what = {"generalisation": "facts held out of every knowledge source (generalisation)",
                "memorisation": "edges of the injected graph (memorisation)"}.get(kind, kind)
        lines.append(f"\nFacts asked about: {md(facts.get('test_pairs', '?'))} probe-test pairs of the "
                     f"{code(facts.get('source', '?'))} graph" + (f", {md(what)}" if what else "") + ".")
    return "\n".join(lines) + "\n"


def own_loader(info: dict) -> str | None:
    """The strategy whose evaluate stage loads the run's model its own way (``EvaluateConfig.load_model``
    overridden), None when ``from_pretrained`` loads it."""
    from kinject.training import EvaluateConfig, evaluate_config_class

    cls = evaluate_config_class(info)
    if cls is None or cls.load_model is EvaluateConfig.load_model:
        return None
    return (info.get("spec", {}).get("strategy") or {}).get("name") or cls.__qualname__


def usage_section(repo_id: str, files: dict[str, Path], loader: str | None = None) -> str:
    config = read_json(files["config.json"]) if "config.json" in files else {}
    lines = ["## How to use\n"]
    if loader:
        lines.append(f"This task model needs kinject's {code(loader)} strategy to load as it was evaluated "
                     "(`pip install kinject`, then `kinject eval <run folder>/model --task ...`: its evaluate "
                     "stage's `load_model`): `from_pretrained` alone loads the encoder and the head without the "
                     "rest.\n")
    elif config:
        arch = next(iter(config.get("architectures") or []), "")
        auto = next((f"AutoModelFor{kind}" for kind in ("TokenClassification", "SequenceClassification")
                     if arch.endswith(f"For{kind}")), "AutoModel")
        lines.append(f"```python\nfrom transformers import AutoTokenizer, {auto}\n\n"
                     f"tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\")\n"
                     f"model = {auto}.from_pretrained(\"{repo_id}\")\n```\n")
    folders = sorted({path.split("/")[0] for path in files if "/" in path})
    if any(folder.endswith("adapters") or folder == "fusion" for folder in folders):
        tuned = "finetuned-adapters" if "finetuned-adapters" in folders else "adapters"
        lines.append("The adapters are in the [adapters](https://docs.adapterhub.ml) library's format, one folder "
                     "each (see Files). To rebuild the task model from them: download the repository "
                     "(`huggingface_hub.snapshot_download`), load its encoder and head with `from_pretrained`, "
                     f"`adapters.init(model)`, `model.load_adapter(f\"{{folder}}/{tuned}/{{name}}\")` for each "
                     "adapter, `model.load_adapter_fusion(f\"{folder}/fusion\")` and activate "
                     "`adapters.Fuse(*names)`. A JSON file beside the fusion weights says how the strategy mixes the "
                     "adapters (MoP: `mop.json`; its softmax mixture is the library's own fusion). The adapters in "
                     "`adapters/` are reusable knowledge for other tasks.\n")
    return "\n".join(lines) if len(lines) > 1 else ""


def files_section(files: dict[str, Path]) -> str:
    sizes: dict[str, int] = {}
    for path, local in files.items():
        top = path.split("/")[0] + ("/" if "/" in path else "")
        sizes[top] = sizes.get(top, 0) + local.stat().st_size
    lines = ["## Files\n"]
    for top, size in sizes.items():
        about = f": {FOLDERS[top]}" if top in FOLDERS else ""
        lines.append(f"* {code(top)} ({size_text(size)}){about}")
    return "\n".join(lines) + "\n"


def size_text(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def reproduce_section(info: dict, run_dir: Path) -> str:
    command = info.get("command") or []
    lines = ["## Reproduce\n"]
    if command:
        line, variables = reproduce_command(command, run_dir)
        setting = "".join(f"{name}=...  # {what}\n" for name, what in variables.items())
        block = "\n".join(map(_plain, f"{setting}{line}".split("\n")))  # in a fence no backtick run ends
        fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", block)), default=0) + 1)
        lines.append("The command that made this run, to paste"
                     + (" after setting the folders of your machine it reads (this machine's are not published)"
                        if variables else "") + f":\n\n{fence}bash\n{block}\n{fence}\n")
    extra = {"seed": info.get("seed"), "git sha": info.get("git_sha"), "created": info.get("created"),
             **(info.get("versions") or {})}
    lines.append(_table({k: v for k, v in extra.items() if v is not None}, ("provenance", "value")))
    return "\n".join(lines)
