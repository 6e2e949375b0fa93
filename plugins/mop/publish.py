"""What a MoP run publishes beside its task model, in the adapters library's format: each partition adapter as its
stage trained it (``adapters/part-<i>/``), the task model's fusion (``fusion/``, with ``mop.json``: the mixture) and,
after a joint fine-tune, the adapters as the task model holds them (``finetuned-adapters/part-<i>/``):
``MopStrategy.shared_files``, which `kinject push` publishes."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

from kinject.api import KinjectError


def adapter_files(run_dir: Path, info: dict) -> dict[str, Path]:
    """repo path -> local folder of the adapters, the fusion and (joint) the fine-tuned adapters; the last two are
    saved from the task model (:func:`.fusion.load_fused_model`) into a temporary folder removed at exit."""
    from adapters import Fuse

    from .fusion import load_fused_model

    files: dict[str, Path] = {}
    for stage in [s for s in info.get("stages", []) if s["name"].startswith("mop-adapter-")]:
        folder = Path(stage["dir"]) / "adapter"
        if not (folder / "adapter_config.json").is_file():
            raise KinjectError(f"{folder}: the adapter of {stage['name']} is gone from the cache; run the run again "
                               "(the cached stages come back)")
        files[f"adapters/{json.loads((folder / 'adapter_config.json').read_text())['name']}"] = folder
    if not (Path(run_dir) / "model" / "config.json").is_file():
        return files
    model = load_fused_model(Path(run_dir) / "model")
    out = Path(tempfile.mkdtemp(prefix="kinject-push-"))
    atexit.register(shutil.rmtree, out, True)
    mixture = {**model.config.mop, "joint": info["spec"]["strategy"].get("finetune", "joint") == "joint"}
    names = mixture["adapters"]
    if len(names) > 1:  # one adapter alone has no fusion
        model.save_adapter_fusion(str(out / "fusion"), Fuse(*names), use_safetensors=True)
        (out / "fusion" / "mop.json").write_text(json.dumps(mixture, indent=2))
        files["fusion"] = out / "fusion"
    for name in names if mixture["joint"] else []:  # frozen adapters stay as adapters/ holds them
        folder = out / "finetuned-adapters" / name
        folder.parent.mkdir(exist_ok=True)
        model.save_adapter(str(folder), name, with_head=False, use_safetensors=True)
        files[f"finetuned-adapters/{name}"] = folder
    return files
