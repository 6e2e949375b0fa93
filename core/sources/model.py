"""A teacher model for knowledge distillation (DoKTra): a Hugging Face hub id or a local directory."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import Field

from kinject.errors import DataMissingError
from kinject.interfaces import Environment, KnowledgeSource, PluginConfig


class ModelSource(KnowledgeSource):
    """Teacher model (HF id or directory, incl. 'minilm'/'tiny') whose predictions are distilled."""

    kind = "model"

    class Config(PluginConfig):
        name: str = Field(..., description="HF model id, local directory, 'minilm' or 'tiny'.")
        revision: str | None = Field(None, description="Hub revision to pin (hub ids only).")

    def model_path(self, env: Environment) -> str:
        from kinject.models import resolve_model

        return resolve_model(self.config.name, env.cache_dir)

    def check(self, env: Environment) -> None:
        from kinject.errors import KinjectError

        try:
            path = self.model_path(env)
        except KinjectError as exc:
            raise DataMissingError(f"teacher model: {exc}") from None
        if not Path(path).exists() and env.offline:
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(path, "config.json", revision=self.config.revision), str):
                raise DataMissingError(f"teacher model {path!r} is not in the local Hugging Face cache and "
                                       "HF_HUB_OFFLINE is set (download it once online, or pass a directory)")

    def fingerprint(self, env: Environment) -> str:
        path = Path(self.model_path(env))
        data: dict = {"name": self.config.name, "revision": self.config.revision}
        if path.is_dir():  # a local model: its files' identity (size + mtime), not their bytes
            data["files"] = sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns]
                                   for p in path.iterdir() if p.is_file())
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
