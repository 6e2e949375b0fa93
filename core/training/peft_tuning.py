"""Parameter-efficient training through peft: LoRA or IA3 adapters on the encoder. The shared fine-tune body
(``training.peft``) trains the task head in full (peft's ``modules_to_save``); a knowledge stage (``mlm_stage(...,
peft=)``, or a method's own body) trains the adapters only. The trained model is saved merged
(``AutoModel.from_pretrained`` loads it as any other) with the adapter beside it."""

from __future__ import annotations

from pathlib import Path

from kinject.api import Head, PeftSpec

HEAD_MODULES = ("classifier", "score", "qa_outputs")  # the task heads transformers' Auto*For* classes add


def add_peft(model, spec: PeftSpec, head: Head | None = None):
    """``model`` wrapped by peft: only the adapters train, and the task head of a fine-tuned model (``head``: the
    task's). Without ``head`` (a masked-LM, a knowledge stage's model) every weight of the model is frozen."""
    from peft import IA3Config, LoraConfig, TaskType, get_peft_model

    if head is None:
        task_type, heads = None, None
    else:
        task_type = TaskType.TOKEN_CLS if head.kind == "token" else TaskType.SEQ_CLS
        heads = [name for name in HEAD_MODULES if hasattr(model, name)]
    if spec.method == "lora":
        config = LoraConfig(task_type=task_type, r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                            target_modules=spec.target_modules, modules_to_save=heads)
    else:
        config = IA3Config(task_type=task_type, target_modules=spec.target_modules,
                           feedforward_modules=spec.feedforward_modules, modules_to_save=heads)
    return get_peft_model(model, config)


def merged(model, adapter_folder: Path | None = None):
    """The plain model with the adapters folded into its weights; the adapter itself saved to ``adapter_folder``."""
    if adapter_folder is not None:
        model.save_pretrained(str(adapter_folder), safe_serialization=True)
    return model.merge_and_unload()


def is_head_parameter(name: str) -> bool:
    """Whether a parameter belongs to the task head, also under peft's wrapping
    (``base_model.model.classifier.modules_to_save.default.weight``)."""
    parts = name.split(".")
    while parts[:2] == ["base_model", "model"]:
        parts = parts[2:]
    return bool(parts) and parts[0] in HEAD_MODULES
