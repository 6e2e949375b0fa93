"""Publishing a run: the files its strategy shares (``Strategy.shared_files``, folders expanded into files), the model
card (:mod:`.card`), and one commit to the Hub (``HfApi.create_repo`` then ``create_commit``). A dry run writes the
card into the run folder (README.md beside run.json) and lists what would be sent, without the network."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, ModelCard, get_token

from kinject.api import KinjectError

from .card import model_card, not_finite, read_json
from .provenance import base_license, base_model, model_label

CARD = "README.md"


@dataclass
class Publication:
    """What a push sends (``files``: repo path -> local file, without the card) and where it went."""

    run_dir: Path
    repo_id: str
    files: dict[str, Path]
    card: ModelCard
    card_path: Path | None = None  # where a dry run wrote the card
    url: str | None = None  # the commit, after an upload
    verified: str = ""  # how far the run's files were checked
    warnings: list[str] = field(default_factory=list)  # what the user should know (said before the listing)

    def listing(self) -> list[tuple[str, int]]:
        """(repo path, bytes) of every file sent, the card first."""
        return [(CARD, len(str(self.card).encode())), *((p, f.stat().st_size) for p, f in self.files.items())]


def run_info(run_dir: Path) -> dict:
    """run.json of a run folder; one line naming the folder when it is not one."""
    if not (run_dir / "run.json").is_file():
        hint = ": it holds --repeats seeds, push one seed-*/ folder" if any(run_dir.glob("seed-*/run.json")) else ""
        raise KinjectError(f"{run_dir}: not a run folder (no run.json){hint}")
    return read_json(run_dir / "run.json")


def verify_run(run_dir: Path, info: dict) -> str:
    """Refuse (one line) a run that is incomplete or damaged: no metrics.json, weights cut short, or model files that
    differ from the digests the stage that produced them recorded (its stage.json in the cache). Returns how far the
    run was verified."""
    import hashlib

    from kinject.api import DataError, check_weights

    if not (run_dir / "metrics.json").is_file():
        raise KinjectError(f"{run_dir}: an incomplete run (no metrics.json: it did not finish); nothing is pushed")
    model = run_dir / "model"
    if not model.is_dir():
        return "no model folder"
    try:
        check_weights(model, "run model")
    except DataError as exc:
        raise KinjectError(f"{exc}; nothing is pushed") from None
    recorded: dict[str, tuple[int, str]] = {}
    for stage in info.get("stages") or []:
        found = read_json(Path(stage.get("dir", "")) / "stage.json") if stage.get("dir") else None
        for name, record in ((found or {}).get("files") or {}).items():
            if name.startswith("model/"):
                recorded[name[len("model/"):]] = (record.get("size"), record.get("sha256"))
    if not recorded:
        return "weights whole; the stage cache that produced them is gone, so not compared with its digests"
    for path in sorted(p for p in model.rglob("*") if p.is_file()):
        name = path.relative_to(model).as_posix()
        if name not in recorded:
            continue
        size, digest = recorded[name]
        with open(path, "rb") as handle:
            if path.stat().st_size != size or hashlib.file_digest(handle, "sha256").hexdigest() != digest:
                raise KinjectError(f"{path}: differs from what the stage that produced it recorded (stage.json); "
                                   "the run folder was changed or damaged; nothing is pushed")
    return "every model file matches the digests its stage recorded"


def shared_files(run_dir: Path, info: dict) -> dict[str, Path]:
    """repo path -> local file: what the run's strategy publishes, folders expanded, in a stable order (a README.md
    among them gives way to the card)."""
    from kinject.api import Strategy, registry

    name = (info.get("spec", {}).get("strategy") or {}).get("name")
    strategy = registry("strategies").get(name) if name else Strategy
    shared = strategy.shared_files(run_dir, info)
    files: dict[str, Path] = {}
    for repo_path, local in shared.items():
        local = Path(local)
        if local.is_dir():
            files.update((f"{repo_path}/{p.relative_to(local).as_posix()}", p)
                         for p in sorted(local.rglob("*")) if p.is_file())
        elif local.is_file():
            files[repo_path] = local
        else:
            raise KinjectError(f"{local}: the {name} strategy publishes it as {repo_path}, but it does not exist")
    files.pop(CARD, None)
    if not files:
        raise KinjectError(f"{run_dir}: nothing to publish (no model/ folder; the {name} strategy shares no files)")
    return files


def check_repo_id(repo_id: str) -> None:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise KinjectError(f"--repo-id {repo_id!r}: {str(exc).splitlines()[0]}") from None


def hub_api() -> HfApi:
    """An authenticated client; one line when offline or without a token."""
    from kinject.api import offline

    if offline():
        raise KinjectError("HF_HUB_OFFLINE is set: pushing needs the network (unset it, or use --dry-run)")
    token = get_token()  # HF_TOKEN, then the token `hf auth login` / `huggingface-cli login` saved
    if not token:
        raise KinjectError("no Hugging Face token: log in (`hf auth login`) or set HF_TOKEN (--dry-run needs none)")
    return HfApi(token=token)


def card_license(info: dict, given: str | None, dry_run: bool, warnings: list[str]) -> str | None:
    """The card's licence: ``given`` (--license), else the base model's (:func:`base_license`); unknown is one line
    for a push and a warning for a dry run."""
    found = given or base_license(base_model(info), info.get("model_path"))
    if found:
        return found
    message = (f"--license: the licence of the base model ({model_label(info)}) is unknown; pass --license ID (the "
               "Hub's licence id, e.g. apache-2.0, mit, cc-by-4.0, other)")
    if not dry_run:
        raise KinjectError(message + "; nothing is pushed")
    warnings.append(message + " to push")
    return None


def publish(run_dir: Path, repo_id: str, *, private: bool = False, dry_run: bool = False,
            revision: str | None = None, commit_message: str | None = None,
            license: str | None = None) -> Publication:
    """Push the run in ``run_dir`` to ``repo_id`` (created if missing, ``private`` then) in one commit on
    ``revision`` (a branch, created if missing; default the main branch) under ``license`` (default: the base
    model's, when known); ``dry_run``: write the card to ``run_dir/README.md`` and send nothing. A NaN or infinite
    metric is left out of the card's model-index, with a warning."""
    from kinject.api import atomic_write_text

    run_dir = Path(run_dir)
    info = run_info(run_dir)
    verified = verify_run(run_dir, info)
    check_repo_id(repo_id)
    api = None if dry_run else hub_api()  # before the work: a missing token is said at once
    files = shared_files(run_dir, info)
    warnings: list[str] = []
    chosen = card_license(info, license, dry_run, warnings)
    bad = not_finite(read_json(run_dir / "metrics.json"))
    if bad:
        warnings.append(f"{', '.join(bad)}: not a number (NaN or infinite): left out of the card's model-index")
    found = Publication(run_dir, repo_id, files, model_card(run_dir, repo_id, files, chosen), verified=verified,
                        warnings=warnings)
    if dry_run:
        found.card_path = run_dir / CARD
        atomic_write_text(found.card_path, str(found.card))
        return found
    spec = info.get("spec", {})
    message = commit_message or (f"kinject push: {(spec.get('strategy') or {}).get('name', '?')} on "
                                 f"{(spec.get('task') or {}).get('name', '?')} ({run_dir.name})")
    operations = [CommitOperationAdd(path_in_repo=CARD, path_or_fileobj=str(found.card).encode()),
                  *(CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(f)) for p, f in files.items())]
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.create_commit(repo_id, operations, commit_message=message, revision=revision)
    except OSError as exc:  # HTTP errors (401, 403, 404...) and connection errors are OSErrors
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise KinjectError(f"push to {repo_id} failed: {reason}") from None
    found.url = getattr(commit, "commit_url", None) or str(commit)
    return found
