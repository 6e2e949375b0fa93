"""Where a pushed run came from, as a card may say it: whether a model name is a Hub id, the base model's licence,
and the command that made the run as one that can be pasted (no folder of the machine that ran it)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

#: kinject's model aliases that are Hub models (``tiny`` is built in-process: no base model on the Hub)
HUB_MODELS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}
#: kinject tasks whose data is on the Hub: task -> (dataset id, config). The splits kinject reads may differ.
HUB_DATASETS = {"bc5chem": ("bigbio/blurb", "bc5chem"), "bc5disease": ("bigbio/blurb", "bc5disease"),
                "ncbi-disease": ("bigbio/blurb", "ncbi_disease"), "bc2gm": ("bigbio/blurb", "bc2gm"),
                "jnlpba": ("bigbio/blurb", "jnlpba"), "chemprot": ("bigbio/chemprot", None),
                "ddi": ("bigbio/ddi_corpus", None), "hoc": ("bigbio/hallmarks_of_cancer", None),
                "pubmedqa": ("bigbio/pubmed_qa", None), "bioasq": ("bigbio/bioasq_task_b", None),
                "biosses": ("bigbio/biosses", None), "gad": ("bigbio/gad", None), "ebmpico": ("bigbio/ebm_pico", None)}
#: the licence of base models kinject knows (a card's ``license``: the weights are a derivative of them)
LICENSES = {"sentence-transformers/all-MiniLM-L6-v2": "apache-2.0", "bert-base-uncased": "apache-2.0",
            "google-bert/bert-base-uncased": "apache-2.0", "microsoft/BiomedNLP-BiomedBERT-base-uncased-abstract":
            "mit", "dmis-lab/biobert-v1.1": "apache-2.0", "allenai/scibert_scivocab_uncased": "apache-2.0"}


def is_hub_id(name: str | None) -> bool:
    """Whether ``name`` reads as a Hub model id (``org/name`` or ``name``), not a folder of this machine."""
    if not name or name.startswith(("/", ".", "~", "\\")) or name.count("/") > 1 or Path(name).is_absolute():
        return False
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def base_license(base: str | None, model_path: str | None) -> str | None:
    """The base model's licence: kinject's table for a known Hub model, else the ``license`` of the model folder's
    own card (README.md front matter) or config.json; None when unknown."""
    if base in LICENSES:
        return LICENSES[base]
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_dir():
        return None
    readme = folder / "README.md"
    if readme.is_file():
        match = re.match(r"---\n(.*?)\n---", readme.read_text(encoding="utf-8", errors="replace"), re.S)
        found = re.search(r"^license:\s*['\"]?([\w.+-]+)", match.group(1), re.M) if match else None
        if found:
            return found.group(1)
    try:
        value = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("license")
    except (OSError, ValueError, AttributeError):
        value = None
    return value if isinstance(value, str) and value else None


_DROPPED = {"--cache-dir"}  # where stages are cached changes no result
_OUTPUT = {"-o", "--output"}


def reproduce_command(command: list[str], run_dir: Path) -> tuple[str, dict[str, str]]:
    """``command`` (run.json's) as a line that can be pasted, and the shell variables it uses (name -> what to set it
    to): each folder of this machine is a variable (``"$TASK_PATH"``, ``"$DATA_DIR"``, ``"$CONFIG"``), the output is
    a folder by its name, the cache dir is left out."""
    out: list[str] = []
    variables: dict[str, str] = {}
    items = [str(c) for c in command]
    i = 0
    while i < len(items):
        item = items[i]
        option, _, inline = item.partition("=") if item.startswith("--") and "=" in item else (item, "", "")
        if option in _DROPPED:
            i += 1 if inline else 2
            continue
        if option in _OUTPUT:  # where the run was written, by its name (a folder here, relative)
            named = Path(inline or (items[i + 1] if i + 1 < len(items) else run_dir.name)).name
            out += [option, shlex.quote(named or run_dir.name)]
            i += 1 if inline else 2
            continue
        out.append(_placeholder(item, items[i - 1] if i else "", variables))
        i += 1
    return " ".join(out), variables


def _placeholder(item: str, before: str, variables: dict[str, str]) -> str:
    """``item`` quoted for the shell, an absolute path in it (whole, or after ``key=``) replaced by a variable."""
    key, sep, value = item.partition("=") if before == "--set" or item.startswith("--") else ("", "", item)
    if not sep:
        key, value = "", item
    if not (value.startswith("/") or value.startswith("~")):
        return shlex.quote(item)
    name = re.sub(r"\W+", "_", key.lstrip("-").split(".", 1)[-1] if key else before.lstrip("-")).upper().strip("_")
    name = {"C": "CONFIG", "PATH": "TASK_PATH"}.get(name, name) or "PATH"
    while name in variables and variables[name] != value:
        name += "_"
    what = f"{'the folder' if not Path(value).suffix else 'the file'} {Path(value).name!r} this run read"
    variables[name] = f"{what} ({key or before}): your copy of it"
    return (shlex.quote(f"{key}{sep}") if sep else "") + f'"${name}"'


def base_model(info: dict) -> str | None:
    """The base model's Hub id: a kinject alias with one, or the model name when it was a Hub id (run.json's
    model_path is then the name itself); None for a local folder or the in-process ``tiny``."""
    name = (info.get("spec", {}).get("model") or {}).get("name")
    if name in HUB_MODELS:
        return HUB_MODELS[name]
    return name if is_hub_id(name) and info.get("model_path") == name else None


def model_label(info: dict) -> str:
    """How the card names the base model: its Hub id, ``tiny``, or a local folder by its last part only."""
    name = str((info.get("spec", {}).get("model") or {}).get("name", "?"))
    hub = base_model(info)
    return hub or (name if name == "tiny" or is_hub_id(name) else f"a local model folder ({Path(name).name})")


def dataset_of(info: dict) -> tuple[str, str, str | None]:
    """(name, type, config) of the task's data in a model-index: its Hub dataset when it has one; else your own data
    (type ``custom``), named after its folder (``task.path``) or the task."""
    task = (info.get("spec", {}).get("task") or {})
    name = task.get("name", "?")
    if name in HUB_DATASETS:
        dataset, config = HUB_DATASETS[name]
        return name, dataset, config
    path = task.get("path")
    return (Path(str(path)).name if isinstance(path, str) and path else name), "custom", None


def _local(value):
    """``value`` (text, or a mapping of texts) with the machine's absolute folders shortened (nothing of the machine
    that ran it is published): the data dir -> ``<data>``, the home folder -> ``~``, others -> their last parts."""
    import os
    import re

    from kinject.api import default_data_dir

    if isinstance(value, dict):
        return {k: _local(v) for k, v in value.items()}
    if not isinstance(value, str):
        return value
    for folder, short in ((str(default_data_dir()), "<data>"), (os.path.expanduser("~"), "~")):
        if folder and folder != "/":
            value = value.replace(folder.rstrip("/"), short)
    return re.sub(r"(?<![\w<~.])/(?:[^\s/,;()'\"]+/)+([^\s/,;()'\"]+)", r".../\1", value)
