"""Model FLOPs utilisation (MFU) of kinject's training steps, beside a bare PyTorch loop and a plain HF Trainer
script on the same batches and model (issue #28; figures in docs/benchmarks.md, "MFU (issue #28)").

Setups, each on fixed random token batches of B x L (every row exactly L tokens: no padding, so every token counts):

  finetune kinject      ``kinject.training.train()`` (kinject's TrainingArguments, length-bucketed sampler, its
                        collator wrapper, bf16 autocast by kinject's default) on the task model of
                        ``kinject.training.stages.build_task_model`` (sequence head, 2 labels)
  finetune bare         the same model and batches: forward, backward, AdamW (fused where torch has it), under the
                        same autocast; batches already on the device; no clipping, no schedule
  finetune bare + clip  the same with clip_grad_norm_(1.0), which the Trainer does (separates its cost)
  plain Trainer         what a user writes with transformers alone: AutoModelForSequenceClassification,
                        TrainingArguments(bf16=<same>), Trainer, DataCollatorWithPadding
  --compile             adds "finetune bare + torch.compile" and "finetune kinject + torch_compile" (the latter
                        passes TrainingArguments(torch_compile=True) through train()'s overrides: measured here
                        only, kinject has no such option)
  --variants            kinject finetune with other TrainingArguments passed through train(): ``nan_filter_off``
                        (logging_nan_inf_filter=False: no device sync per step), ``non_blocking`` (pinned batches
                        copied without blocking), ``workers2`` (two loader workers), ``compile``; ``a+b`` for both
  --methods             the method steps through their public builders, each beside a bare loop of the same model
                        and loss: kimera (``kimera.retrain.retrain``: KGMultiTaskModel, the three KG tasks,
                        a random 30% head mask through HeadUpdateScaler; its own Trainer subclass over kinject's
                        training_arguments), mop (adapter step: ``adapter_encoder`` + ``EntityPredictor``, 1000
                        entities, through ``train()``), doktra (AB-distillation step against cached teacher [CLS]
                        vectors: ``distill_trainer`` through ``train()``), mlm (``train_mlm`` with the
                        whole-word-masking collator and the sparse MLM head)

Timing: a global optimizer-step post-hook counts steps in every setup alike; the time from the end of step
``--warmup`` to the end of step ``--warmup + --steps`` (device synchronised at both) over ``--steps`` is the step
time, so Trainer set-up and the first steps (optimizer state, compilation) stay out.

Model FLOPs per step (the formula, not transformers' ``floating_point_ops``): per token, 2 x P_stack (forward) +
2 x P_stack (activation gradients) + 2 x P_stack_trainable (weight gradients) + 12 x layers x hidden x L
(attention scores and mixing, forward and backward), where P_stack = the parameters of the transformer layer stack
(embeddings excluded); i.e. the usual 6 x P_non-embedding x tokens + 12 x layers x hidden x L x tokens when
everything trains, 4 x P + 2 x P_trainable for a frozen base (MoP adapters). Pooler and heads count once per row;
the MLM vocabulary projection (and its transform) counts on the masked ~15% of tokens it is applied to.

Peak: a square matmul loop (n = 2048 on CPU, 8192 on CUDA), bf16 and fp32 (TF32 off, torch's default), measured
at the start of every round; MFU = model FLOP/s / that round's bf16 peak (and / the fp32 peak). Rounds alternate
the order of the setups so they share the machine's noise; ratios are taken within a round, medians reported.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.bench_mfu [--device cpu|cuda] [--model tiny|minilm|bert-base]
       [--batch 16 32] [--length 128] [--steps 5] [--warmup 2] [--rounds 2] [--compile] [--methods all|none|...]
       [--variants nan_filter_off ...] [--precision auto|bf16|fp32] [--json out.json]
       On a 2-core machine beside other jobs, set OMP_NUM_THREADS=1 (docs/benchmarks.md says why).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KINJECT_PROGRESS", "0")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

METHODS = ("kimera", "mop", "doktra", "mlm")
VARIANTS = {  # name -> TrainingArguments overrides passed through kinject's train()
    "nan_filter_off": {"logging_nan_inf_filter": False},
    "workers2": {"dataloader_num_workers": 2, "dataloader_persistent_workers": True},
    "non_blocking": {"accelerator_config": {"non_blocking": True}},  # pinned batches copied without a sync
    "no_pin": {"dataloader_pin_memory": False},
    "compile": {"torch_compile": True},
}
BIG = 10 ** 8  # logging/saving intervals no run reaches (the settings allow up to kinject.spec.MAX_STEPS)


# -- set-up -------------------------------------------------------------------------------------------- #
@dataclass
class Context:
    device: str
    bf16: bool
    path: str  # encoder directory
    tokenizer: Any
    batch: int
    length: int
    warmup: int
    steps: int
    work: Path

    @property
    def total_steps(self) -> int:
        return self.warmup + self.steps

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()


def encoder_dir(name: str, work: Path) -> str:
    """A loadable encoder directory: tiny (kinject's), minilm (embedded), bert-base (BertConfig() defaults, random
    weights, seeded, built here with a plain vocabulary of the config's size: no download)."""
    from kinject.api import resolve_model
    from kinject.training import minilm_path

    if name == "tiny":
        return resolve_model("tiny", work)
    if name == "minilm":
        return str(minilm_path())
    if name != "bert-base":
        raise SystemExit(f"--model {name}: tiny, minilm or bert-base")
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = work / "bert-base"
    config = BertConfig()
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    special = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
    (folder / "vocab.txt").write_text("".join(f"{special.get(i, f'w{i}')}\n" for i in range(config.vocab_size)))
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    return str(folder)


def random_rows(ctx: Context, n: int, seed: int):
    """n rows of L random token ids: [CLS] w ... w [SEP], w drawn from the ordinary vocabulary."""
    import torch

    tok = ctx.tokenizer
    vocab = len(tok)
    low = 1000 if vocab > 2000 else len(tok.all_special_ids) + 1
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, vocab, (n, ctx.length), generator=g)
    ids[:, 0], ids[:, -1] = tok.cls_token_id, tok.sep_token_id
    return ids


def encodings(ctx: Context, n: int, seed: int) -> list[dict]:
    ids = random_rows(ctx, n, seed)
    ones = [1] * ctx.length
    zeros = [0] * ctx.length
    return [{"input_ids": row, "attention_mask": ones, "token_type_ids": zeros} for row in ids.tolist()]


POOL = 4  # distinct batches; the bare loops cycle through them, the Trainer datasets repeat them


def feature_rows(ctx: Context, label: Callable[[int, list[int]], Any], seed: int = 0) -> list[dict]:
    """B x max(warmup + steps, POOL) feature rows (every Trainer batch full), POOL x B distinct ones repeated."""
    pool = encodings(ctx, POOL * ctx.batch, seed)
    rows = []
    for i in range(ctx.batch * max(ctx.total_steps, POOL)):
        row = dict(pool[i % len(pool)])
        row["labels"] = label(i % len(pool), row["input_ids"])
        rows.append(row)
    return rows


def bare_batches(ctx: Context, rows: list[dict], collator) -> list[dict]:
    """The POOL distinct batches, collated once and moved to the device."""
    import torch

    out = []
    for b in range(POOL):
        batch = collator([rows[b * ctx.batch + i] for i in range(ctx.batch)])
        out.append({k: v.to(ctx.device) if torch.is_tensor(v) else v for k, v in dict(batch).items()})
    return out


# -- measuring ----------------------------------------------------------------------------------------- #
class StepClock:
    """Counts optimiser steps (any torch optimizer, through the global step post-hook) and times steps
    warmup+1 .. warmup+steps; records which optimizer ran."""

    def __init__(self, ctx: Context):
        self.ctx, self.count, self.marks, self.optimizer = ctx, 0, {}, None

    def _hook(self, optimizer, args, kwargs) -> None:
        self.count += 1
        if self.optimizer is None:
            d = optimizer.defaults
            self.optimizer = f"{type(optimizer).__name__}(fused={d.get('fused')}, foreach={d.get('foreach')})"
        if self.count in (self.ctx.warmup, self.ctx.total_steps):
            self.ctx.sync()
            self.marks[self.count] = time.perf_counter()

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handle = register_optimizer_step_post_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False

    @property
    def step_s(self) -> float:
        if len(self.marks) != 2:
            raise RuntimeError(f"{self.count} optimiser steps seen, {self.ctx.total_steps} expected")
        return (self.marks[self.ctx.total_steps] - self.marks[self.ctx.warmup]) / self.ctx.steps


def parameter_counts(model) -> dict[str, float]:
    """Parameters of the transformer layer stack (all, trainable), the other non-embedding ones, geometry."""
    import torch

    stack = next((m for _, m in model.named_modules()
                  if isinstance(getattr(m, "layer", None), torch.nn.ModuleList)), None)
    if stack is None:
        raise RuntimeError(f"{type(model).__name__}: no transformer layer stack found")
    embedding = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    in_stack = {id(p) for p in stack.parameters()}
    seen: set[int] = set()
    counts = {"stack": 0, "stack_trainable": 0, "rest": 0, "rest_trainable": 0}
    for p in model.parameters():
        if id(p) in seen or id(p) in embedding:
            continue
        seen.add(id(p))
        where = "stack" if id(p) in in_stack else "rest"
        counts[where] += p.numel()
        if p.requires_grad:
            counts[where + "_trainable"] += p.numel()
    config = getattr(model, "config", None) or model.encoder.config
    counts.update(layers=config.num_hidden_layers, hidden=config.hidden_size, vocab=config.vocab_size)
    return counts


def step_flops(counts: dict, batch: int, length: int, mlm_fraction: float = 0.0) -> float:
    """Model FLOPs of one training step (see the module docstring)."""
    tokens = batch * length
    per_token = 4 * counts["stack"] + 2 * counts["stack_trainable"] + 12 * counts["layers"] * counts["hidden"] * length
    flops = tokens * per_token + batch * (4 * counts["rest"] + 2 * counts["rest_trainable"])
    if mlm_fraction:  # transform (h x h) + decoder (h x V), forward and backward, on the masked positions
        h = counts["hidden"]
        flops += 6 * (h * h + h * counts["vocab"]) * mlm_fraction * tokens
    return float(flops)


def measure(ctx: Context, run: Callable[[], Any]) -> dict:
    """Run one setup under a StepClock; peak device memory on CUDA."""
    import torch

    gc.collect()
    if ctx.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()  # what earlier setups left behind (should be ~0)
    environ = {k: v for k, v in os.environ.items() if k.startswith("ACCELERATE_")}
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        with StepClock(ctx) as clock:
            run()
    finally:  # TrainingArguments(torch_compile=True) leaves ACCELERATE_DYNAMO_BACKEND set (every later Trainer in
        # the process would compile) and may switch TF32 on; accelerate keeps one process-wide state
        from accelerate.state import AcceleratorState

        for key in [k for k in os.environ if k.startswith("ACCELERATE_") and k not in environ]:
            del os.environ[key]
        os.environ.update(environ)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        AcceleratorState._reset_state()
    out = {"step_s": clock.step_s, "optimizer": clock.optimizer}
    if ctx.device == "cuda":
        out["peak_mem_gib"] = (torch.cuda.max_memory_allocated() - baseline) / 2 ** 30
        out["left_gib"] = baseline / 2 ** 30
    return out


def matmul_peak(device: str, dtype, n: int, blocks: int = 3, block_s: float = 0.25) -> float:
    """Best FLOP/s of blocks of square n x n matmuls (two input pairs alternated)."""
    import torch

    pairs = [(torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype))
             for _ in range(2)]
    out = torch.empty(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for a, b in pairs * 2:
        torch.matmul(a, b, out=out)
    sync()
    start = time.perf_counter()
    torch.matmul(*pairs[0], out=out)
    sync()
    one = max(time.perf_counter() - start, 1e-6)
    reps = max(2, min(50, int(block_s / one)))  # ~block_s per block
    best = 0.0
    for _ in range(blocks):
        sync()
        start = time.perf_counter()
        for i in range(reps):
            torch.matmul(*pairs[i % 2], out=out)
        sync()
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - start))
    del pairs, out
    return best


# -- the setups ---------------------------------------------------------------------------------------- #
def adamw(params, lr: float):
    import torch

    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)


def bare_loop(ctx: Context, model, batches: list[dict], loss_of: Callable, compile: bool = False,
              clip: bool = False, attach: Callable | None = None, lr: float = 5e-5) -> None:
    """Forward, backward, AdamW over ``batches`` (cycled) for warmup + steps steps, under the run's autocast."""
    import torch

    model.to(ctx.device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = adamw(params, lr)
    if attach is not None:
        attach(optimizer)
    forward = torch.compile(model) if compile else model
    autocast = torch.autocast(ctx.device, dtype=torch.bfloat16, enabled=ctx.bf16)
    for i in range(ctx.total_steps):
        with autocast:
            loss = loss_of(forward, batches[i % len(batches)])
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def training_spec(ctx: Context, **extra):
    from kinject.spec import TrainingSpec

    return TrainingSpec(**{"epochs": 1, "max_steps": ctx.total_steps, "batch_size": ctx.batch, "learning_rate": 5e-5,
                           "bf16": ctx.bf16, "logging_steps": BIG, "save_steps": BIG, **extra})


def finetune_setups(ctx: Context, compile: bool, variants: list[str]) -> dict[str, dict]:
    from transformers import DataCollatorWithPadding

    from kinject.interfaces import Head
    from kinject.training import build_task_model, train

    head = Head("sequence", 2, labels=("no", "yes"))
    rows = feature_rows(ctx, lambda b, ids: ids[1] % 2)
    collator = DataCollatorWithPadding(ctx.tokenizer)
    holder: dict = {}

    def model():
        holder["model"] = build_task_model(ctx.path, head, seed=0)
        return holder["model"]

    def kinject(**overrides):
        def run():
            train(model(), rows, collator, training_spec(ctx), ctx.work / "ft", seed=0, stage="bench", **overrides)
        return run

    def bare(compile_=False, clip=False):
        def run():
            m = model()
            bare_loop(ctx, m, bare_batches(ctx, rows, collator), lambda f, b: f(**b).loss, compile_, clip)
        return run

    def plain():
        from datasets import Dataset
        from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
        from transformers.trainer_callback import PrinterCallback

        m = holder["model"] = AutoModelForSequenceClassification.from_pretrained(ctx.path, num_labels=2)
        args = TrainingArguments(output_dir=str(ctx.work / "plain"), max_steps=ctx.total_steps,
                                 per_device_train_batch_size=ctx.batch, learning_rate=5e-5, warmup_ratio=0.1,
                                 weight_decay=0.01, bf16=ctx.bf16, use_cpu=ctx.device == "cpu", report_to=[],
                                 save_strategy="no", disable_tqdm=True, logging_steps=BIG, seed=0)
        trainer = Trainer(model=m, args=args, train_dataset=Dataset.from_list(rows), data_collator=collator)
        trainer.remove_callback(PrinterCallback)  # keep the final metrics dict off the table's output
        trainer.train()

    counts = parameter_counts(build_task_model(ctx.path, head, seed=0))
    flops = step_flops(counts, ctx.batch, ctx.length)
    setups = {"finetune kinject": (kinject(), "finetune"),
              "finetune bare": (bare(), "finetune"),
              "finetune bare + clip": (bare(clip=True), "finetune"),
              "plain HF Trainer": (plain, "finetune")}
    if compile:
        setups["finetune bare + torch.compile"] = (bare(compile_=True), "finetune")
        setups["finetune kinject + torch_compile"] = (kinject(torch_compile=True), "finetune")
    for name in variants:  # "a+b": both sets of overrides
        overrides = {k: v for part in name.split("+") for k, v in VARIANTS[part].items()}
        setups[f"finetune kinject + {name}"] = (kinject(**overrides), "finetune")
    return {name: {"run": run, "family": family, "flops": flops, "holder": holder} for name, (run, family) in
            setups.items()}


def kimera_setups(ctx: Context) -> dict[str, dict]:
    import torch
    from datasets import Dataset

    from kinject.api import load_encoder
    from kinject.plugins.kimera.masks import HeadUpdateScaler
    from kinject.plugins.kimera.multitask import KG_TASKS, TASK_ID, KGMultiTaskModel
    from kinject.plugins.kimera.retrain import TaskCollator, retrain

    relations = 4
    per_task = -(-ctx.total_steps // len(KG_TASKS)) * ctx.batch  # full batches only, enough for every step

    def labels(task: str):
        def label(b: int, ids: list[int]):
            if task == "entity":  # the masked entity: tokens 1-3 predicted (MLM), the rest ignored
                return [ids[i] if 1 <= i <= 3 else -100 for i in range(len(ids))]
            return ids[2] % (relations if task == "relation" else 2)
        return label

    data = {}
    for t, task in enumerate(KG_TASKS):
        pool = encodings(ctx, POOL * ctx.batch, seed=10 + t)
        data[task] = [{**pool[i % len(pool)], "labels": labels(task)(0, pool[i % len(pool)]["input_ids"])}
                      for i in range(per_task)]
    g = torch.Generator().manual_seed(0)
    holder: dict = {}

    def mask_for(encoder):
        cfg = encoder.config
        return (torch.rand(cfg.num_hidden_layers, cfg.num_attention_heads, generator=g) < 0.3).float()

    def kinject():
        encoder = load_encoder(ctx.path)
        holder["model"] = encoder
        retrain(encoder, ctx.tokenizer, {t: Dataset.from_list(r) for t, r in data.items()}, relations,
                training_spec(ctx, group_by_length=False), ctx.work / "kimera", 0, mask=mask_for(encoder))

    def bare():
        encoder = load_encoder(ctx.path)
        model = holder["model"] = KGMultiTaskModel(encoder, relations)
        collate = TaskCollator(ctx.tokenizer)
        batches = []
        for task in KG_TASKS:  # one batch of each task, in turn
            rows = [{**r, "task": TASK_ID[task]} for r in data[task][:ctx.batch]]
            batches.append({k: v.to(ctx.device) for k, v in collate(rows).items()})
        scaler = HeadUpdateScaler(encoder, mask_for(encoder))
        bare_loop(ctx, model, batches, lambda f, b: f(**b)["loss"], attach=scaler.attach)

    counts = parameter_counts(KGMultiTaskModel(load_encoder(ctx.path), relations))
    flops = step_flops(counts, ctx.batch, ctx.length)
    return {"kimera retrain kinject": {"run": kinject, "family": "kimera", "flops": flops, "holder": holder},
            "kimera retrain bare": {"run": bare, "family": "kimera", "flops": flops, "holder": holder}}


def mop_setups(ctx: Context) -> dict[str, dict]:
    from adapters import SeqBnConfig

    from kinject.api import load_encoder
    from kinject.knowledge.kg.batching import KGCollator
    from kinject.plugins.mop.entity_prediction import EntityPredictor
    from kinject.plugins.mop.part_adapters import adapter_encoder
    from kinject.training import train

    classes = 1000
    rows = feature_rows(ctx, lambda b, ids: ids[1] % classes, seed=20)
    rows = [{k: v for k, v in r.items() if k != "token_type_ids"} for r in rows]  # KG rows carry no token types
    collator = KGCollator(ctx.tokenizer)
    holder: dict = {}

    def model():
        encoder = adapter_encoder(load_encoder(ctx.path), "part-0", SeqBnConfig(reduction_factor=8).to_dict())
        holder["model"] = EntityPredictor(encoder, classes)
        return holder["model"]

    def kinject():
        train(model(), rows, collator, training_spec(ctx, learning_rate=1e-4), ctx.work / "mop", seed=0,
              stage="bench")

    def bare():
        m = model()
        bare_loop(ctx, m, bare_batches(ctx, rows, collator), lambda f, b: f(**b).loss, lr=1e-4)

    flops = step_flops(parameter_counts(model()), ctx.batch, ctx.length)
    return {"mop adapter kinject": {"run": kinject, "family": "mop", "flops": flops, "holder": holder},
            "mop adapter bare": {"run": bare, "family": "mop", "flops": flops, "holder": holder}}


def doktra_setups(ctx: Context) -> dict[str, dict]:
    import torch

    from kinject.interfaces import Head
    from kinject.plugins.doktra.features import PairedCollator, cls_and_logits
    from kinject.plugins.doktra.losses import abd_loss
    from kinject.plugins.doktra.trainers import DistillRecord, DistillSettings, distill_trainer
    from kinject.training import build_task_model, train

    head = Head("sequence", 6, labels=tuple("abcdef"))
    probe = build_task_model(ctx.path, head, seed=0)
    width = probe.config.hidden_size
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(POOL, ctx.batch, width, generator=g)  # cached teacher [CLS] vectors, one per row
    rows = feature_rows(ctx, lambda b, ids: ids[1] % 6, seed=30)
    for i, row in enumerate(rows):
        row["teacher_cls"] = teacher[(i // ctx.batch) % POOL, i % ctx.batch].tolist()
    collator = PairedCollator(ctx.tokenizer)
    settings = DistillSettings("abd", head.problem_type, beta=0.5, gamma=1.0)  # gamma 1: every step distils
    holder: dict = {}

    def model():
        holder["model"] = build_task_model(ctx.path, head, seed=0)
        return holder["model"]

    def kinject():
        train(model(), rows, collator, training_spec(ctx), ctx.work / "doktra", seed=0, stage="bench",
              trainer_cls=distill_trainer(settings, DistillRecord()), remove_unused_columns=False)

    def loss_of(forward, batch):
        student = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        cls, _ = cls_and_logits(forward, student)
        return abd_loss(cls, batch["teacher_cls"], settings.margin, settings.abd_scale)

    def bare():
        m = model()
        batches = [{k: v for k, v in b.items() if k != "labels"} for b in bare_batches(ctx, rows, collator)]
        bare_loop(ctx, m, batches, loss_of)

    flops = step_flops(parameter_counts(probe), ctx.batch, ctx.length)
    return {"doktra distill kinject": {"run": kinject, "family": "doktra", "flops": flops, "holder": holder},
            "doktra distill bare": {"run": bare, "family": "doktra", "flops": flops, "holder": holder}}


def mlm_setups(ctx: Context) -> dict[str, dict]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForMaskedLM

    from kinject.knowledge.masked_lm import sparse_prediction, train_mlm
    from kinject.knowledge.masking import WholeWordMaskCollator
    from kinject.knowledge.packing import SEP_WORD

    g = torch.Generator().manual_seed(2)
    ids = random_rows(ctx, POOL * ctx.batch, seed=40)
    rows = []
    for row in ids.tolist():  # words of 1-3 tokens between [CLS] and [SEP]
        sizes = torch.randint(1, 4, (ctx.length,), generator=g).tolist()
        words, w = [], 0
        while len(words) < ctx.length - 2:
            words += [w] * sizes[w]
            w += 1
        rows.append({"input_ids": row, "word_ids": [SEP_WORD, *words[:ctx.length - 2], SEP_WORD]})
    rows = [rows[i % len(rows)] for i in range(ctx.batch * max(ctx.total_steps, POOL))]
    collator = WholeWordMaskCollator(ctx.tokenizer, seed=0)
    holder: dict = {}

    def model():
        holder["model"] = AutoModelForMaskedLM.from_pretrained(ctx.path)
        return holder["model"]

    def kinject():
        train_mlm(model(), Dataset.from_list(rows), collator, training_spec(ctx, group_by_length=False,
                                                                           learning_rate=1e-4),
                  ctx.work / "mlm", 0, "bench", False, sparse=True)

    def bare():
        m = model()
        batches = bare_batches(ctx, rows, collator)
        with sparse_prediction(m):
            bare_loop(ctx, m, batches, lambda f, b: f(**b).loss, lr=1e-4)

    flops = step_flops(parameter_counts(model()), ctx.batch, ctx.length, mlm_fraction=0.15)
    return {"mlm kinject": {"run": kinject, "family": "mlm", "flops": flops, "holder": holder},
            "mlm bare": {"run": bare, "family": "mlm", "flops": flops, "holder": holder}}


# -- driver -------------------------------------------------------------------------------------------- #
def run_batch(args, batch: int, path: str, tokenizer, work: Path, peaks: list[dict]) -> dict[str, list[dict]]:
    import torch

    ctx = Context(args.device, args.bf16, path, tokenizer, batch, args.length, args.warmup, args.steps, work)
    setups = finetune_setups(ctx, args.compile, args.variants)
    builders = {"kimera": kimera_setups, "mop": mop_setups, "doktra": doktra_setups, "mlm": mlm_setups}
    for method in args.methods:
        setups.update(builders[method](ctx))
    results: dict[str, list[dict]] = {name: [] for name in setups}
    order = list(setups)
    for r in range(args.rounds):
        peak = {"bf16": matmul_peak(args.device, torch.bfloat16, args.peak_size, block_s=args.peak_block_s),
                "fp32": matmul_peak(args.device, torch.float32, args.peak_size, block_s=args.peak_block_s)}
        peaks.append(peak)
        for name in (order if r % 2 == 0 else order[::-1]):
            setup = setups[name]
            out = measure(ctx, setup["run"])
            setup["holder"].clear()
            out.update(round=r, flops=setup["flops"], peak_bf16=peak["bf16"], peak_fp32=peak["fp32"])
            results[name].append(out)
            print(f"  B={batch} round {r}: {name:34} {out['step_s'] * 1000:9.1f} ms/step  "
                  f"MFU {setup['flops'] / out['step_s'] / peak['bf16']:.3f}", flush=True)
            if args.json:  # partial results survive a run cut short
                args.json.with_suffix(".partial.json").write_text(json.dumps(results, indent=1, default=str))
        for setup in setups.values():
            setup["holder"].clear()
    bare_of = {setup["family"]: name for name, setup in setups.items() if name.endswith(" bare")}
    for name, rows in results.items():  # ratios within rounds: bare step time / this step time
        family = setups[name]["family"]
        bare = bare_of[family]
        for row in rows:
            ref = next(x for x in results[bare] if x["round"] == row["round"])
            row["vs_bare"] = ref["step_s"] / row["step_s"]
            if family == "finetune":
                plain = next(x for x in results["plain HF Trainer"] if x["round"] == row["round"])
                row["vs_plain"] = plain["step_s"] / row["step_s"]
    return results


def summarise(results: dict[str, list[dict]], batch: int, length: int) -> list[dict]:
    out = []
    for name, rows in results.items():
        step = statistics.median(r["step_s"] for r in rows)
        mfu = statistics.median(r["flops"] / r["step_s"] / r["peak_bf16"] for r in rows)
        mfu32 = statistics.median(r["flops"] / r["step_s"] / r["peak_fp32"] for r in rows)
        out.append({"batch": batch, "setup": name, "ms_per_step": step * 1000,
                    "tokens_per_s": batch * length / step, "tflops": rows[0]["flops"] / step / 1e12,
                    "mfu_bf16": mfu, "mfu_fp32": mfu32,
                    "vs_bare": statistics.median(r["vs_bare"] for r in rows),
                    "vs_plain": statistics.median(r["vs_plain"] for r in rows) if "vs_plain" in rows[0] else None,
                    "peak_mem_gib": max(r["peak_mem_gib"] for r in rows) if "peak_mem_gib" in rows[0] else None,
                    "optimizer": rows[0]["optimizer"], "rounds": len(rows)})
    return out


def table(rows: list[dict]) -> str:
    lines = ["| B | setup | ms/step | tokens/s | model TFLOP/s | MFU (bf16 peak) | MFU (fp32 peak) | speed vs bare "
             "| speed vs plain Trainer | peak mem GiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vs_plain = f"{r['vs_plain']:.3f}" if r["vs_plain"] is not None else ""
        mem = f"{r['peak_mem_gib']:.2f}" if r["peak_mem_gib"] is not None else ""
        lines.append(f"| {r['batch']} | {r['setup']} | {r['ms_per_step']:.1f} | {r['tokens_per_s']:,.0f} | "
                     f"{r['tflops']:.4g} | {r['mfu_bf16']:.3g} | {r['mfu_fp32']:.3g} | {r['vs_bare']:.3f} | "
                     f"{vs_plain} | {mem} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--model", choices=("tiny", "minilm", "bert-base"), default="minilm")
    parser.add_argument("--batch", type=int, nargs="+", default=[16])
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per setup and round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (optimizer state, compilation)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="add torch.compile setups")
    parser.add_argument("--methods", nargs="+", default=["all"], help=f"all, none or some of {', '.join(METHODS)}")
    parser.add_argument("--variants", nargs="*", default=[],
                        help=f"kinject finetune with TrainingArguments overrides: {', '.join(VARIANTS)}; a+b for both")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="auto: kinject's default (bf16 autocast where the device computes bf16 natively)")
    parser.add_argument("--peak-size", type=int, default=None, help="matmul size of the peak (default 2048 CPU, "
                                                                     "8192 CUDA)")
    parser.add_argument("--peak-block-s", type=float, default=0.25, help="seconds per timed block of the peak")
    parser.add_argument("--json", type=Path, default=None, help="write every measurement here")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # kinject trains on CUDA whenever it sees one
    args.methods = list(METHODS) if args.methods == ["all"] else [] if args.methods == ["none"] else args.methods
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        parser.error(f"--methods: unknown {unknown}")
    unknown = [v for name in args.variants for v in name.split("+") if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}")
    args.peak_size = args.peak_size or (8192 if args.device == "cuda" else 2048)

    import torch
    import transformers

    from kinject.api import load_tokenizer
    from kinject.defaults import native_bf16

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    args.bf16 = native_bf16() if args.precision == "auto" else args.precision == "bf16"
    work = Path(tempfile.mkdtemp(prefix="bench-mfu-"))
    try:
        path = encoder_dir(args.model, work)
        tokenizer = load_tokenizer(path)
        name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
        header = (f"{args.model}, L={args.length}, {'bf16 autocast' if args.bf16 else 'float32'}, {name}, torch "
                  f"{torch.__version__}, transformers {transformers.__version__}; {args.rounds} rounds x "
                  f"{args.steps} timed steps (+{args.warmup} warm-up), medians")
        print(header, flush=True)
        rows, raw, peaks = [], {}, []
        for batch in args.batch:
            results = run_batch(args, batch, path, tokenizer, work, peaks)
            raw[batch] = results
            rows += summarise(results, batch, args.length)
        peak = {k: statistics.median(p[k] for p in peaks) for k in ("bf16", "fp32")}
        print(f"\n{header}\nmeasured matmul peak ({args.peak_size}^2, median of rounds): bf16 "
              f"{peak['bf16'] / 1e12:.4g} TFLOP/s, fp32 {peak['fp32'] / 1e12:.4g} TFLOP/s; optimizers: "
              + "; ".join(sorted({f"{r['setup'].split(' ')[0]}: {r['optimizer']}" for r in rows})))
        print()
        print(table(rows), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"header": header, "args": {k: (str(v) if isinstance(v, Path) else v)
                                                                         for k, v in vars(args).items()},
                                             "peaks": peaks, "rows": rows, "raw": raw}, indent=2, default=str))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
