"""The `kimera` strategy: head importance and mask -> KG retraining under the mask -> fine-tune -> evaluate.

Stages (each cached): ``finetune`` (phase 1, shared with the finetune baseline), ``kimera-mask-<kind>``
(importance + iterative mask search), ``kimera-retrain`` (multi-task KG training from the pre-trained
model), ``kimera-finetune`` + ``kimera-evaluate`` (phase 3), ``kimera-analysis`` (heatmaps, table 3).
Baselines in the same plugin: ``variant: finetune`` and ``variant: pruned`` (the hard mask's heads
physically removed with ``prune_heads`` — the pruning is in config.json, so it survives save/load —
then fine-tuned and evaluated).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import ClassVar

from kinject.errors import SpecError
from kinject.interfaces import Stage, Strategy

from .config import KimeraConfig

log = logging.getLogger("kinject")


def _task_model(path, head, attn: str):
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    from kinject.models import offline

    cls = AutoModelForTokenClassification if head.kind == "token" else AutoModelForSequenceClassification
    return cls.from_pretrained(str(path), local_files_only=offline(), attn_implementation=attn)


def scoring_set(run, cfg: KimeraConfig, tokenizer):
    """(split, examples, features, batches) of the importance scoring set; retrieval groups kept whole."""
    task = run.task
    split = cfg.score_split or task.eval_splits[0]
    examples = task.examples(split, run.env)
    chosen, groups = [], set()
    for ex in examples:
        group = ex.get("group")
        if len(chosen) >= cfg.score_examples and (group is None or group not in groups):
            break
        chosen.append(ex)
        groups.add(group)
    features = task.featurize(tokenizer, chosen, run.spec.model.max_length, run.env)
    collator = task.collator(tokenizer)
    batches = [collator(features[i:i + cfg.score_batch_size]) for i in range(0, len(features), cfg.score_batch_size)]
    batches = [{k: v for k, v in dict(b).items() if k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
               for b in batches]
    return split, chosen, features, batches


class KimeraStrategy(Strategy):
    """KIMERA: retrain the attention heads a task needs least on KG triples, then fine-tune (+ baselines)."""

    Config: ClassVar = KimeraConfig

    # -- stage builders ------------------------------------------------------------------------ #
    def _scoring_config(self, run) -> dict:
        cfg = self.config
        return {"score_split": cfg.score_split, "score_examples": cfg.score_examples,
                "score_batch_size": cfg.score_batch_size, "search_metric": cfg.search_metric or run.task.selection_metric(),
                "max_length": run.spec.model.max_length, "attn": run.spec.model.attn_implementation}

    def mask_stage(self, run, kind: str) -> Stage:
        from kinject.stages import task_fingerprint

        cfg = self.config
        config = {"kind": kind, "tau": cfg.tau, "rho": cfg.rho, "max_rounds": cfg.max_rounds,
                  "task": task_fingerprint(run.task, run.env), "finetuned_model": cfg.finetuned_model,
                  **self._scoring_config(run)}

        def fn(ctx) -> None:
            from kinject.models import load_tokenizer

            from .importance import search_mask
            from .masks import save_masks

            model_dir = cfg.finetuned_model or ctx.inputs["finetune"] / "model"
            tokenizer = load_tokenizer(str(model_dir))
            model = _task_model(model_dir, run.task.head(run.env), run.spec.model.attn_implementation)
            split, examples, features, batches = scoring_set(run, cfg, tokenizer)
            name = config["search_metric"]

            def metric(logits) -> float:
                scores = run.task.score(split, examples, features, logits, run.env)
                if name not in scores:
                    raise SpecError(f"strategy.search_metric: task {run.task.name!r} reports no {name!r} "
                                    f"(has: {', '.join(scores)})")
                return scores[name]

            result = search_mask(model, batches, run.task.head(run.env).problem_type, metric, cfg.rho, cfg.tau,
                                 soft=kind == "soft", max_rounds=cfg.max_rounds)
            save_masks(ctx.out / "masks.json", **{kind: result.mask, "importance": result.first_importance})
            summary = {"kind": kind, "metric": name, "split": split, "examples": len(features),
                       "baseline": result.baseline, "rounds": result.rounds,
                       "masked_heads": int((result.mask < 1).sum()), "heads": int(result.mask.numel())}
            (ctx.out / "search.json").write_text(json.dumps(summary, indent=2))

        inputs = () if cfg.finetuned_model else ("finetune",)
        return Stage(name=f"kimera-mask-{kind}", fn=fn, config=config, inputs=inputs, version="1",
                     artifacts=("masks.json", "search.json"))

    def retrain_stage(self, run, mask: str, forward: bool, scratch: bool) -> Stage:
        cfg = self.config
        if len(run.sources) > 1:
            raise SpecError("sources: KIMERA retrains on one knowledge graph; merge the graphs into one "
                            f"`triples` source (got {len(run.sources)} sources)")
        source = run.sources[0] if run.sources else None
        if source is not None and getattr(source, "kind", "triples") != "triples":
            raise SpecError(f"sources.0: KIMERA needs a knowledge graph (triples), {source.name!r} is a "
                            f"{source.kind} source")
        if source is None:
            from kinject.sources.hpo import default_source

            source = default_source(self.config.kg_max_triples)
            source.check(run.env)
        env = dataclasses.replace(run.env, limit=None)  # the KG size is kg_max_triples, not --limit
        config = {"model": run.spec.model.model_dump(), "seed": run.spec.seed, "mask": mask, "forward_mask": forward,
                  "from_scratch": scratch, "source": {"name": source.name, "fingerprint": source.fingerprint(env)},
                  **{k: v for k, v in cfg.model_dump(mode="json").items() if k.startswith("kg_")},
                  "alphas": cfg.alphas.model_dump(), "pooling": cfg.pooling, "other_params": cfg.other_params,
                  "weight_decay": run.spec.training.weight_decay, "warmup_ratio": run.spec.training.warmup_ratio}

        def fn(ctx) -> None:
            import torch
            from transformers import AutoConfig, AutoModel

            from kinject.engine import is_main_process
            from kinject.kg.data import KGDataConfig, build_kg_data, length_grouped_batches
            from kinject.models import load_tokenizer, offline
            from kinject.spec import TrainingSpec
            from kinject.stages import save_model

            from .masks import load_mask
            from .retrain import KG_TASKS, retrain

            tokenizer = load_tokenizer(run.model_path)
            attn = run.spec.model.attn_implementation
            if scratch:
                torch.manual_seed(run.spec.seed)
                encoder = AutoModel.from_config(AutoConfig.from_pretrained(run.model_path), attn_implementation=attn)
            else:
                encoder = AutoModel.from_pretrained(run.model_path, local_files_only=offline(),
                                                    attn_implementation=attn)
            alphas = cfg.alphas.model_dump()
            tasks = [t for t in KG_TASKS if alphas[t] > 0]
            kg = build_kg_data(source, env, tokenizer, KGDataConfig(
                tasks=tasks, max_length=cfg.kg_max_length, max_triples=cfg.kg_max_triples,
                negatives_seed=run.spec.seed))
            if len(kg.relations) < 2 and "relation" in tasks:  # one relation: nothing to predict
                log.warning("kimera: the KG has %d relation type(s); relation prediction disabled", len(kg.relations))
                alphas["relation"] = 0.0
                tasks.remove("relation")
            head_mask = None
            if mask != "none":
                stage = f"kimera-mask-{mask}"
                layers, heads = encoder.config.num_hidden_layers, encoder.config.num_attention_heads
                head_mask = load_mask(ctx.inputs[stage] / "masks.json", mask, (layers, heads))
            training = TrainingSpec(epochs=1, max_steps=cfg.kg_steps, learning_rate=cfg.kg_learning_rate,
                                    batch_size=cfg.kg_batch_size, weight_decay=run.spec.training.weight_decay,
                                    warmup_ratio=run.spec.training.warmup_ratio, group_by_length=False,
                                    save_steps=max(cfg.kg_steps // 2, 1), logging_steps=max(cfg.kg_steps // 10, 1),
                                    bf16=run.spec.training.bf16)
            stats = retrain(encoder, tokenizer, {t: getattr(kg, t) for t in tasks}, len(kg.relations), training,
                            ctx.work, run.spec.seed, mask=head_mask, forward_mask=forward,
                            other_params=cfg.other_params, pooling=cfg.pooling, alphas=alphas,
                            batches_of=length_grouped_batches, resume=ctx.resume)
            stats["kg"] = kg.stats
            if is_main_process():
                save_model(encoder, tokenizer, ctx.out / "model")
                (ctx.out / "retrain.json").write_text(json.dumps(stats, indent=2, default=str))

        inputs = (f"kimera-mask-{mask}",) if mask != "none" else ()
        return Stage(name="kimera-retrain", fn=fn, config=config, inputs=inputs, produces_model=True)

    def pruned_encoder_stage(self, run) -> Stage:
        def fn(ctx) -> None:
            from transformers import AutoModel

            from kinject.models import load_tokenizer, offline
            from kinject.stages import save_model

            from .masks import load_mask, prune_by_mask

            encoder = AutoModel.from_pretrained(run.model_path, local_files_only=offline())
            shape = (encoder.config.num_hidden_layers, encoder.config.num_attention_heads)
            plan = prune_by_mask(encoder, load_mask(ctx.inputs["kimera-mask-hard"] / "masks.json", "hard", shape))
            save_model(encoder, load_tokenizer(run.model_path), ctx.out / "model")
            (ctx.out / "pruned.json").write_text(json.dumps({str(k): v for k, v in plan.items()}, indent=2))

        return Stage(name="kimera-pruned-encoder", fn=fn, config={"model": run.spec.model.model_dump()},
                     inputs=("kimera-mask-hard",), produces_model=True)

    def analysis_stage(self, run, kind: str) -> Stage:
        cfg = self.config

        def fn(ctx) -> None:
            from kinject.models import load_tokenizer

            from .analysis import write_analysis
            from .importance import normalize_importance, score_heads
            from .masks import load_mask

            model_dir = ctx.inputs["kimera-finetune"] / "model"
            tokenizer = load_tokenizer(str(model_dir))
            model = _task_model(model_dir, run.task.head(run.env), run.spec.model.attn_implementation)
            _, _, _, batches = scoring_set(run, cfg, tokenizer)
            raw, _ = score_heads(model, batches, run.task.head(run.env).problem_type)
            masks_file = ctx.inputs[f"kimera-mask-{kind}"] / "masks.json"
            mask = load_mask(masks_file, kind)
            before = load_mask(masks_file, "importance", tuple(mask.shape))
            write_analysis(ctx.out, mask, before, normalize_importance(raw), kind)

        return Stage(name="kimera-analysis", fn=fn, config=self._scoring_config(run),
                     inputs=(f"kimera-mask-{kind}", "kimera-finetune"), artifacts=("analysis.json", "plots"))

    # -- the pipeline --------------------------------------------------------------------------- #
    def stages(self, run) -> list[Stage]:
        from kinject.stages import evaluate_stage, finetune_stage

        cfg = self.config
        if cfg.variant == "finetune":
            return [finetune_stage(run), evaluate_stage(run, "finetune")]
        phase1 = [] if cfg.finetuned_model else [finetune_stage(run)]
        if cfg.variant == "pruned":
            return [*phase1, self.mask_stage(run, "hard"), self.pruned_encoder_stage(run),
                    finetune_stage(run, "kimera-pruned-finetune", init_from="kimera-pruned-encoder"),
                    evaluate_stage(run, "kimera-pruned-finetune", name="kimera-pruned-evaluate")]
        mask, forward, scratch = cfg.settings()
        stages = [*phase1, self.mask_stage(run, mask)] if mask != "none" else []
        stages += [self.retrain_stage(run, mask, forward, scratch),
                   finetune_stage(run, "kimera-finetune", init_from="kimera-retrain"),
                   evaluate_stage(run, "kimera-finetune", name="kimera-evaluate")]
        if cfg.analysis and mask != "none":
            stages.append(self.analysis_stage(run, mask))
        return stages
