"""A teacher model for knowledge distillation (DoKTra): a Hugging Face hub id, a local model directory, a
kinject run directory (its ``model/``), or the named models ``minilm`` / ``tiny``."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field

from kinject.api import DataMissingError, Environment, KnowledgeSource, PluginConfig


def run_model_dir(path: Path) -> Path | None:
    """The ``model/`` of a kinject run directory (one holding run.json), else None."""
    import os

    if os.path.lexists(path / "run.json") and (path / "model" / "config.json").is_file():  # a damaged run.json: refused later
        return path / "model"
    return None


class ModelSource(KnowledgeSource):
    """Teacher model (HF id, model or run directory, 'minilm'/'tiny') whose knowledge is distilled."""

    kind = "model"

    class Config(PluginConfig):
        model: str = Field(..., validation_alias=AliasChoices("model", "name"),
                           description="HF model id, local model directory, a kinject run directory (its model/ "
                                       "is used), 'minilm' or 'tiny'.")
        revision: str | None = Field(None, description="Hub revision to pin (hub ids only).")

    def model_path(self, env: Environment) -> str:
        """A directory or hub id ``from_pretrained`` accepts (KinjectError when a named directory is missing)."""
        from kinject.api import resolve_model

        local = Path(self.config.model).expanduser()
        found = run_model_dir(local) if local.is_dir() else None
        return str(found.resolve()) if found else resolve_model(self.config.model, env.cache_dir)

    def check(self, env: Environment) -> None:
        from kinject.api import KinjectError

        try:
            path = self.model_path(env)
        except KinjectError as exc:
            raise DataMissingError(f"teacher {exc}") from None
        if Path(path).exists() and self.config.revision:
            raise DataMissingError(f"teacher model {self.config.model!r}: revision {self.config.revision!r} pins a "
                                   "hub revision, but this is a local directory")
        if not Path(path).exists() and env.offline:
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(path, "config.json", revision=self.config.revision), str):
                raise DataMissingError(f"teacher model {path!r} is not in the local Hugging Face cache and "
                                       "HF_HUB_OFFLINE is set (download it once online, or pass a directory)")

    def fingerprint(self, env: Environment) -> str:
        """What identifies the weights, as for the run's own model (package version, a local folder's file
        stats, or the hub id and revision)."""
        from kinject.api import model_fingerprint

        return model_fingerprint(self.config.model, self.model_path(env), self.config.revision)
