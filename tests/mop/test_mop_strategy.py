"""The `mop` strategy (tiny model, a 3-cluster toy KG): bad input fails before any stage, the stage plan and its
keys, the partition and each part's classifier, the entity heads, a subset of the adapters or one alone, fusion-only
training over (un)trained adapters, the paper protocol, a damaged adapter failing the fine-tune, and end-to-end runs
with their analysis artifacts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from helpers import run_kinject, write_kg


@pytest.fixture
def kg_file(tmp_path) -> Path:
    return write_kg(tmp_path / "kg.tsv")


def spec(tmp_path, textcls_dir, kg: Path | None, model_updates: dict | None = None, **strategy) -> dict:
    return {"model": {"name": "tiny", "max_length": 32, **(model_updates or {})},
            "task": {"name": "textcls", "path": str(textcls_dir)},
            "strategy": {"name": "mop", "partitions": 3, "adapter_epochs": 1, "adapter_batch_size": 16, **strategy},
            "sources": [{"name": "triples", "path": str(kg)}] if kg else [],
            "training": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3},
            "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)}


def prepared(tmp_path, textcls_dir, kg, model_updates: dict | None = None, **strategy):
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    return prepare(build_spec(spec(tmp_path, textcls_dir, kg, model_updates, **strategy)))


# -- bad input: one line, exit 2, nothing written, before any stage ------------------------------------------ #
SLOW = pytest.mark.slow  # the costlier cases (about 10 s each on 2 busy cores): the fast tier keeps the others


@pytest.mark.parametrize("sets,message", [
    (["strategy.partitions=1"], "strategy.partitions: Input should be greater than or equal to 2"),
    pytest.param(["strategy.partitions=25"],
                 "strategy.partitions: 25 parts but the knowledge graph has only 24 entities",
                 marks=SLOW),
    pytest.param(["strategy.mixture=sparse"], "strategy.mixture: Input should be 'softmax', 'gumbel' or 'moe'",
                 marks=SLOW),
    pytest.param(["strategy.mixture=moe", "strategy.top_k=4"],
                 "strategy.top_k: 4 adapters per token but only 3 partitions",
                 marks=SLOW),
    pytest.param(["strategy.adapter=nonexistent"],
                 "strategy.adapter: rejected by adapters: ValueError: Could not identify",
                 marks=SLOW),
    pytest.param(["strategy.adapter=lora"], "strategy.adapter: LoRAConfig is not a bottleneck adapter", marks=SLOW),
    pytest.param(["strategy.adapter.non_linearity=bogus", "strategy.adapter.mh_adapter=false",
                  "strategy.adapter.output_adapter=true", "strategy.adapter.reduction_factor=8"],
                 "strategy.adapter: rejected by adapters for this model", marks=SLOW),
    pytest.param(["sources.0.path=EMPTY"], "sources.0: knowledge source 'triples' yields no triples", marks=SLOW),
    (["strategy.adapters_used=[0,3]"], "strategy.adapters_used: part 3 but only 3 partitions (0..2)"),
    (["strategy.adapters_used=[1,1]"], "strategy.adapters_used: parts must be distinct"),
    (["strategy.adapters_used=[]"], "strategy.adapters_used: name at least one part"),
    (["strategy.mixture=moe", "strategy.top_k=3", "strategy.adapters_used=[0,2]"],
     "strategy.top_k: 3 adapters per token but only 2 adapters in strategy.adapters_used"),
    pytest.param(["strategy.entity_head=random"],
                 "strategy.entity_head: Input should be 'names', 'linear' or 'frozen-random'",
                 marks=SLOW),
])
def test_bad_input_is_one_line_exit_2_before_any_stage(tmp_path, textcls_dir, kg_file, capsys, sets, message):
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    args = ["run", "mop", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "sources.0.name=triples", "--set", f"sources.0.path={kg_file}", "--set", "strategy.partitions=3",
            "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "run")]
    for item in sets:
        args += ["--set", item.replace("EMPTY", str(empty))]
    assert run_kinject(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("error:")]) == 1 and message in err[-1], err
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache" / "stages").exists()


# -- the plan ---------------------------------------------------------------------------------------------- #
def test_stage_plan_spreads_the_adapters_and_keys_the_knowledge_side_without_the_task(tmp_path, textcls_dir,
                                                                                       kg_file):
    from kinject.keys import plan
    from kinject.plugins.finetune.strategy import FinetuneStrategy

    run = prepared(tmp_path, textcls_dir, kg_file)
    names = [s.name for s in run.strategy.stages(run)]  # (hook plugins may add stages after these)
    assert names == ["finetune", "evaluate", "mop-partition", "mop-adapter-0", "mop-adapter-1", "mop-adapter-2",
                     "mop-finetune", "mop-evaluate", "mop-report", "mop-compare"]
    spread = [s.name for s in run.stages if s.spread]
    assert spread == ["mop-adapter-0", "mop-adapter-1", "mop-adapter-2"]
    assert all("adapters" in s.libraries for s in run.stages if s.name.startswith("mop-") and s.name != "mop-compare"
               and s.name != "mop-partition")
    keys = {p.stage.name: p.key for p in plan(run)}
    other = prepared(tmp_path, textcls_dir, kg_file)
    other.spec = other.spec.model_copy(update={"seed": 7})  # another seed and budget for the task ...
    other.spec.training.learning_rate = 3e-3
    other.stages = other.strategy.stages(other)
    other_keys = {p.stage.name: p.key for p in plan(other)}
    for name in ("mop-partition", "mop-adapter-0", "mop-adapter-2"):  # ... reuses the same adapters
        assert other_keys[name] == keys[name]
    assert other_keys["mop-finetune"] != keys["mop-finetune"]
    pooled = prepared(tmp_path, textcls_dir, kg_file, model_updates={"pooling": "mean", "max_length": 96})
    pooled_keys = {p.stage.name: p.key for p in plan(pooled)}
    for name in ("mop-partition", "mop-adapter-0"):  # the task's pooling and length do not re-key the adapters
        assert pooled_keys[name] == keys[name]
    assert pooled_keys["mop-finetune"] != keys["mop-finetune"]
    run.strategy = FinetuneStrategy()
    run.stages = run.strategy.stages(run)
    assert {p.stage.name: p.key for p in plan(run)} == {n: keys[n] for n in ("finetune", "evaluate")}
    shuffled = prepared(tmp_path, textcls_dir, kg_file, shuffle=0.5, baseline=False, analysis=False)
    assert [s.name for s in shuffled.stages][0] == "mop-partition" and "mop-compare" not in \
        [s.name for s in shuffled.stages]
    assert {p.stage.name: p.key for p in plan(shuffled)}["mop-adapter-0"] != keys["mop-adapter-0"]


@pytest.mark.slow
def test_default_source_is_the_embedded_hpo_graph(tmp_path, textcls_dir):
    run = prepared(tmp_path, textcls_dir, None, kg_max_triples=2000)
    source = next(s for s in run.stages if s.name == "mop-partition").config.kg.source
    assert source.name == "hpo" and source.options["sample"] < 0.01


# -- partition and adapters --------------------------------------------------------------------------------- #
def run_stages(run, names, dirs: dict | None = None):
    """Run the planned stages named in ``names`` (given ``dirs``: the folders of stages already run)."""
    from kinject.keys import plan
    from kinject.stage_runner import run_stage

    dirs = dict(dirs or {})
    for planned in plan(run):
        if planned.stage.name in names:
            run_stage(run, planned, dirs)
            dirs[planned.stage.name] = planned.folder
    return dirs


@pytest.mark.parametrize("cross_part", ["drop", "head"])
@pytest.mark.slow
def test_partition_finds_the_clusters_and_each_classifier_covers_its_part(tmp_path, textcls_dir, kg_file,
                                                                          cross_part):
    from safetensors.torch import load_file

    from kinject.knowledge.kg.partition import EntityGraph, metis_parts
    from kinject.knowledge.sources.triples import TriplesSource

    entity_head = "names" if cross_part == "drop" else "linear"
    run = prepared(tmp_path, textcls_dir, kg_file, cross_part=cross_part, adapter_max_steps=2,
                   bidirectional=cross_part == "head", entity_head=entity_head)
    dirs = run_stages(run, {"mop-partition", "mop-adapter-0", "mop-adapter-1", "mop-adapter-2"})
    report = json.loads((dirs["mop-partition"] / "partition.json").read_text())
    assert report["edge_cut"] == 1 and report["part_sizes"] == [8, 8, 8]  # the bridge is the only cut edge
    assert report["triples_dropped"] == (1 if cross_part == "drop" else 0)
    parts = load_file(str(dirs["mop-partition"] / "partition.safetensors"))["parts"].numpy()
    graph = EntityGraph.from_triples(TriplesSource(path=str(kg_file)).iter_triples(run.env))
    assert report["metis"] == "kway"  # the reference's k-way METIS, also at K <= 8
    assert (parts == metis_parts(graph, 3, seed=1, recursive=False)).all()  # shuffle 0 = the plain METIS partition
    bridged = set()
    for i in range(3):
        head = load_file(str(dirs[f"mop-adapter-{i}"] / "entity_head.safetensors"))
        classes = set(head["classes"].tolist())
        own = set(np.flatnonzero(parts == i).tolist())
        assert head["bias"].shape[0] == len(classes)  # one score per class, either head
        if entity_head == "names":  # one frozen name embedding per class, hidden wide
            assert head["names"].shape == (len(classes), run.stages[0].config.model.load_encoder().config.hidden_size)
        else:
            assert head["weight"].shape[0] == len(classes)
        if cross_part == "drop":
            assert classes == own  # exactly the part's entities
        else:
            assert own <= classes
            bridged |= classes - own
        stats = json.loads((dirs[f"mop-adapter-{i}"] / "adapter.json").read_text())
        assert stats["base_unchanged"] and stats["train"]["global_step"] == 2 and stats["entity_head"] == entity_head
        assert stats["train_probe"]["n"] == min(stats["train_rows"], 2000)  # the stored-facts probe
        assert stats["train_rows"] + stats["heldout_rows"] == (2 if cross_part == "head" else 1) * stats["triples"]
        assert (dirs[f"mop-adapter-{i}"] / "adapter" / "adapter.safetensors").exists()
    assert len(bridged) == (1 if cross_part == "head" else 0)  # the bridge's foreign tail


@pytest.mark.slow
def test_shuffle_moves_entities_between_parts_and_keeps_sizes(tmp_path, textcls_dir, kg_file):
    from safetensors.torch import load_file

    base = run_stages(prepared(tmp_path, textcls_dir, kg_file), {"mop-partition"})["mop-partition"]
    moved = run_stages(prepared(tmp_path, textcls_dir, kg_file, shuffle=1.0), {"mop-partition"})["mop-partition"]
    a, b = (load_file(str(d / "partition.safetensors"))["parts"].numpy() for d in (base, moved))
    assert (a != b).any() and (np.bincount(a) == np.bincount(b)).all()
    cut = [json.loads((d / "partition.json").read_text())["edge_cut"] for d in (base, moved)]
    assert cut[1] > cut[0]


# -- end to end --------------------------------------------------------------------------------------------- #
@pytest.mark.slow
def test_end_to_end_run_writes_comparison_model_and_analysis(tmp_path, textcls_dir, kg_file):
    from kinject.engine import execute
    from kinject.api import load_tokenizer
    from kinject.plugins.mop.fusion import load_fused_model
    from kinject.training import predict

    run = prepared(tmp_path, textcls_dir, kg_file, mixture="moe", top_k=2)
    metrics = execute(run, tmp_path / "run")
    out = tmp_path / "run"
    comparison = metrics["comparison"]
    assert comparison["other_name"] == "mop/names+moe" and comparison["n"] == 16
    assert comparison["difference"] == pytest.approx(comparison["other"] - comparison["baseline"])
    report = json.loads((out / "partition.json").read_text())
    assert report["k"] == 3 and report["edge_cut"] < report["random_edge_cut"]
    adapters = json.loads((out / "partition-adapters.json").read_text())
    assert [p["part"] for p in adapters["parts"]] == [0, 1, 2] and adapters["all_base_weights_unchanged"]
    assert all(0 <= p["heldout"]["accuracy@1"] <= p["heldout"]["accuracy@10"] <= 1 for p in adapters["parts"])
    probe = [p["train_probe"]["accuracy@1"] for p in adapters["parts"]]
    assert adapters["mean_train_probe_accuracy@1"] == pytest.approx(np.mean(probe))
    mixture = json.loads((out / "mixture.json").read_text())
    weights = np.asarray([e["weights"] for e in mixture["examples"]])
    assert weights.shape == (16, 3) and mixture["layer"] == 1
    assert np.allclose(weights.sum(1), 1, atol=1e-5) and ((weights > 0).sum(1) == 2).all()  # moe: top-2 at [CLS]
    for png in ("mixture.png", "partition-adapters.png"):
        assert (out / png).stat().st_size > 5000
    # the run's model/ reloads (adapters API + the mixture) to the predictions the run scored
    task = run.task
    model = load_fused_model(out / "model", task.head(run.env).kind)
    tokenizer = load_tokenizer(str(out / "model"))
    examples = task.examples("test", run.env)
    logits = predict(model, task.featurize(tokenizer, examples, 32, run.env), task.collator(tokenizer), 64,
                     tmp_path / "work")
    records = [json.loads(line) for line in (out / "predictions" / "test.jsonl").read_text().splitlines()]
    assert [r["pred"] for r in records] == [task.head(run.env).labels[i] for i in logits.argmax(1)]


def test_part_rows_are_labelled_with_their_own_tail_and_head(tmp_path, kg_file, tiny_model):
    from kinject.interfaces import Environment
    from kinject.knowledge.kg.data import KGDataConfig, build_kg_data
    from kinject.api import load_tokenizer
    from kinject.plugins.mop.entity_prediction import head_features, part_classes, tail_features
    from kinject.knowledge.sources.triples import TriplesSource

    tokenizer = load_tokenizer(tiny_model)
    data = build_kg_data(TriplesSource(path=str(kg_file)), Environment(tmp_path, tmp_path / "cache"), tokenizer,
                         KGDataConfig(tasks=["tail"], max_length=64))  # relation cap 64 // 8 tokens
    head, tail = (np.asarray(data.triples[c]) for c in ("head", "tail"))
    rows = np.arange(len(head))[60:90:3]  # a selection that starts past the first rows
    classes = part_classes(np.zeros(len(data.entities), np.int64), 0, head, tail, rows, True)
    forward, backward = tail_features(data, rows, classes), head_features(data, rows, classes, tokenizer, 64)
    assert [int(classes[f["labels"]]) for f in forward] == tail[rows].tolist()
    assert [int(classes[f["labels"]]) for f in backward] == head[rows].tolist()
    first = tokenizer.decode(backward[0]["input_ids"])  # [CLS] r [SEP] t [SEP]
    r, t = data.relations[int(np.asarray(data.triples["relation"])[rows[0]])], data.entities[tail[rows[0]]]
    assert first == f"[CLS] {r.lower()} [SEP] {t.lower()} [SEP]"
    h = data.entities[head[rows[0]]].lower()
    assert tokenizer.decode(forward[0]["input_ids"]) == f"[CLS] {h} [SEP] {r.lower()} [SEP]"


def test_each_stage_is_keyed_by_its_own_code_only(tmp_path, textcls_dir, kg_file):
    """Editing the analysis or the mixture must not retrain the K adapters (their keys hold their own code), and the
    fused fine-tune and its evaluation are the training library's bodies keyed by the fusion code only."""
    from kinject.keys import plan

    planned = {p.stage.name: p for p in plan(prepared(tmp_path, textcls_dir, kg_file))}
    record = {name: p.record for name, p in planned.items()}
    code = {name: set(p.code_modules) for name, p in planned.items()}
    mop = "kinject.plugins.mop."
    ours = {name: {m.removeprefix(mop) for m in modules if m.startswith(mop)} for name, modules in code.items()}
    assert ours["mop-partition"] == {"partition"}
    assert ours["mop-adapter-0"] == {"entity_prediction", "part_adapters", "partition"}
    assert ours["mop-finetune"] == ours["mop-evaluate"] == {"fusion", "part_adapters"}  # no KG code either
    assert ours["mop-report"] == {"report", "fusion", "part_adapters"}
    assert not any(m.startswith("kinject.knowledge") for m in code["mop-finetune"])
    assert planned["mop-finetune"].stage.body.__module__ == "kinject.training.stages"  # the one fine-tune body
    assert record["mop-finetune"]["body"] == "finetune_body" and record["mop-evaluate"]["body"] == "evaluate_body"


def test_zero_adapter_steps_leaves_the_adapters_untrained(tmp_path, textcls_dir, kg_file, caplog):
    import logging

    (tmp_path / "s0").mkdir()
    (tmp_path / "s2").mkdir()
    from safetensors.torch import load_file

    dirs = {}
    for steps in (0, 2):
        run = prepared(tmp_path / f"s{steps}", textcls_dir, kg_file, adapter_max_steps=steps)
        with caplog.at_level(logging.WARNING, logger="kinject"):
            dirs[steps] = run_stages(run, {"mop-partition", "mop-adapter-0"})["mop-adapter-0"]
    untrained_warnings = [r.getMessage() for r in caplog.records if "stays untrained" in r.getMessage()]
    assert untrained_warnings == ["mop-adapter-0: partition 0: adapter_max_steps is 0; its adapter stays untrained"]
    stats = json.loads((dirs[0] / "adapter.json").read_text())
    assert stats["train"] == {} and stats["train_rows"] > 0 and stats["base_unchanged"]
    # next to the adapter's held-out accuracy: the tail prior's, and how many classes it ever ranks first
    assert set(stats["heldout_prior"]) == {"accuracy@1", "accuracy@10"}
    assert 0 <= stats["heldout_prior"]["accuracy@1"] <= stats["heldout_prior"]["accuracy@10"] <= 1
    assert 1 <= stats["heldout"]["distinct_top1"] <= min(stats["classes"], stats["heldout_rows"])
    untrained, trained = (load_file(str(d / "adapter" / "adapter.safetensors")) for d in (dirs[0], dirs[2]))
    assert untrained.keys() == trained.keys()
    assert any(not (untrained[k] == trained[k]).all() for k in untrained)  # same init (kg_seed), then trained


def test_name_head_ranks_the_entity_whose_name_the_query_matches_before_any_training():
    import torch

    from kinject.plugins.mop.entity_prediction import NameScoringHead

    names = torch.randn(5, 16)
    head = NameScoringHead(names)
    queries = names[[3, 0, 4]] * 2.5 + 0.01 * torch.randn(3, 16)  # scale does not matter: cosine
    assert head(queries).argmax(1).tolist() == [3, 0, 4]
    with torch.no_grad():
        head.bias[1] = 100.0  # the per-class bias can learn a prior on top
    assert head(queries).argmax(1).tolist() == [1, 1, 1]
    assert sorted(n for n, p in head.named_parameters()) == ["bias", "log_scale", "proj.bias", "proj.weight"]


def test_an_adapter_at_the_tail_prior_on_its_own_training_rows_is_flagged(caplog):
    from kinject.plugins.mop.entity_prediction import check_learning

    prior = {"accuracy@1": 0.02, "accuracy@10": 0.10}
    at_prior, stored = {"accuracy@1": 0.02, "accuracy@10": 0.10, "distinct_top1": 1}, {"accuracy@1": 0.13,
                                                                                     "accuracy@10": 0.46}
    with caplog.at_level(logging.INFO, logger="kinject"):
        check_learning("s", 0, at_prior, prior, at_prior, prior)  # nothing learned: a warning
        check_learning("s", 1, at_prior, prior, stored, prior)  # facts stored, none generalise: a note
        check_learning("s", 2, stored, prior, stored, prior)  # both: silent
    records = [(r.levelname, r.getMessage().split(":")[1].strip()) for r in caplog.records]
    assert records == [("WARNING", "partition 0"), ("INFO", "partition 1")]
    assert "learned the tail prior" in caplog.records[0].getMessage()
    assert "does not generalise" in caplog.records[1].getMessage()


def test_prior_accuracy_is_what_answering_the_most_frequent_training_tail_scores():
    from kinject.plugins.mop.entity_prediction import prior_accuracy

    train = [3, 3, 3, 1, 1, 0]  # frequency order 3, 1, 0, then the unseen 2
    assert prior_accuracy(train, [3, 3, 1, 2], ks=(1, 2, 3, 4)) == {  # 2 never trained: ranked after the seen
        "accuracy@1": 0.5, "accuracy@2": 0.75, "accuracy@3": 0.75, "accuracy@4": 1.0}
    assert prior_accuracy(train, [2], ks=(1,)) == {"accuracy@1": 0.0}
    assert prior_accuracy(train, [], ks=(1,))["accuracy@1"] != prior_accuracy(train, [], ks=(1,))["accuracy@1"]  # nan


# -- which adapters a run uses, the entity heads, fusion-only training, the paper protocol -------------------- #
def test_a_subset_or_one_adapter_plans_only_those_adapters_under_the_full_runs_keys(tmp_path, textcls_dir, kg_file):
    from kinject.keys import plan

    full = {p.stage.name: p for p in plan(prepared(tmp_path, textcls_dir, kg_file))}
    for used, label in (([2, 0], "mop/names+parts-0-2"), ([1], "mop/names+part-1")):
        run = prepared(tmp_path, textcls_dir, kg_file, adapters_used=used)
        assert run.strategy.config.adapters_used == sorted(used)
        planned = {p.stage.name: p for p in plan(run)}
        adapters = [f"mop-adapter-{i}" for i in sorted(used)]
        assert [name for name in planned if name.startswith("mop-adapter-")] == adapters
        for name in ("mop-partition", *adapters):  # the same cache entries as a run over all K
            assert planned[name].key == full[name].key
        assert planned["mop-finetune"].stage.config.adapters == adapters
        assert planned["mop-finetune"].key != full["mop-finetune"].key
        assert planned["mop-compare"].stage.config.labels == ("finetune", label)
        assert ("mixture.json" in planned["mop-report"].stage.artifacts) == (len(used) > 1)
    everything = {p.stage.name: p.key for p in plan(prepared(tmp_path, textcls_dir, kg_file, adapters_used=[0, 1, 2]))}
    assert everything == {name: p.key for name, p in full.items()}


@pytest.mark.slow
def test_the_frozen_random_entity_head_never_trains_only_the_adapter_does(tmp_path, textcls_dir, kg_file):
    import torch
    from safetensors.torch import load_file

    heads, weights = {}, {}
    for steps in (0, 3):
        (tmp_path / f"s{steps}").mkdir()
        run = prepared(tmp_path / f"s{steps}", textcls_dir, kg_file, entity_head="frozen-random",
                       adapter_max_steps=steps, adapter_warmup_ratio=0.0)
        adapter = next(s for s in run.stages if s.name == "mop-adapter-1").config
        assert adapter.training.warmup_ratio == 0.0 and adapter.entity_head == "frozen-random"
        folder = run_stages(run, {"mop-partition", "mop-adapter-1"})["mop-adapter-1"]
        heads[steps] = load_file(str(folder / "entity_head.safetensors"))
        weights[steps] = load_file(str(folder / "adapter" / "adapter.safetensors"))
        stats = json.loads((folder / "adapter.json").read_text())
        assert stats["entity_head"] == "frozen-random" and stats["base_unchanged"]
    assert sorted(heads[0]) == ["classes", "linear.bias", "linear.weight"]
    assert all(torch.equal(heads[0][k], heads[3][k]) for k in heads[0])  # the same random map, never trained
    assert any(not torch.equal(weights[0][k], weights[3][k]) for k in weights[0])  # the adapter learned


@pytest.mark.parametrize("adapter_steps", [0, 2])
@pytest.mark.slow
def test_fusion_only_training_keeps_the_saved_adapters_and_the_base_bit_for_bit(tmp_path, textcls_dir, kg_file,
                                                                                tiny_model, adapter_steps):
    """MoP with fusion-only training over untrained (adapter_max_steps=0) or trained adapters: the fine-tuned model
    holds exactly the adapters its stages saved and the base model's weights; only the fusion and the head train."""
    import torch
    from safetensors.torch import load_file

    run = prepared(tmp_path, textcls_dir, kg_file, adapter_max_steps=adapter_steps, finetune="fusion",
                   baseline=False, analysis=False)
    dirs = run_stages(run, {"mop-partition", "mop-adapter-0", "mop-adapter-1", "mop-adapter-2", "mop-finetune"})
    model = load_file(str(dirs["mop-finetune"] / "model" / "model.safetensors"))
    for i in range(3):
        stats = json.loads((dirs[f"mop-adapter-{i}"] / "adapter.json").read_text())
        assert (stats["train"] == {}) == (adapter_steps == 0)
        saved = load_file(str(dirs[f"mop-adapter-{i}"] / "adapter" / "adapter.safetensors"))
        assert all(torch.equal(model[f"bert.{key}"], tensor) for key, tensor in saved.items())
    base = load_file(str(Path(tiny_model) / "model.safetensors"))
    assert all(torch.equal(model[f"bert.{key}" if not key.startswith("bert.") else key], tensor)
               for key, tensor in base.items() if "pooler" not in key)
    fusion = [key for key in model if "adapter_fusion_layer" in key]
    value = next(key for key in fusion if key.endswith("value.weight"))
    assert not torch.equal(model[value], torch.eye(model[value].shape[0]))  # the fusion trained
    trained = json.loads((dirs["mop-finetune"] / "train.json").read_text())["trainable_parameters"]
    assert trained == sum(model[key].numel() for key in [*fusion, "classifier.weight", "classifier.bias"])


@pytest.mark.slow
def test_a_damaged_saved_adapter_fails_the_fused_fine_tune(tmp_path, textcls_dir, kg_file):
    from safetensors.torch import load_file, save_file

    from kinject.errors import DataError

    run = prepared(tmp_path, textcls_dir, kg_file, adapter_max_steps=0, baseline=False, analysis=False)
    dirs = run_stages(run, {"mop-partition", "mop-adapter-0", "mop-adapter-1", "mop-adapter-2"})
    weights = dirs["mop-adapter-1"] / "adapter" / "adapter.safetensors"
    tensors = load_file(str(weights))
    key = sorted(tensors)[0]
    tensors[key] = tensors[key] + 1.0
    save_file(tensors, str(weights))
    with pytest.raises(DataError, match="partition adapter 'part-1' did not load as saved: the file no longer holds"):
        run_stages(run, {"mop-finetune"}, dirs)


def test_the_paper_protocol_sets_the_papers_settings_where_the_run_sets_none(tmp_path, textcls_dir, kg_file):
    from kinject.preparation import prepare
    from kinject.defaults import apply_protocol
    from kinject.defaults import apply_recommended
    from kinject.spec_reading import build_spec
    from kinject.plugins.mop.strategy import MopStrategy

    data = spec(tmp_path, textcls_dir, kg_file)
    data.update(strategy={"name": "mop", "partitions": 3}, protocol="paper")  # K set by the run: kept
    data.pop("training")
    run = prepare(build_spec(data))
    cfg, training = run.strategy.config, run.spec.training
    assert (cfg.partitions, cfg.mixture, cfg.finetune, cfg.entity_head, cfg.adapters_used) == \
        (3, "softmax", "joint", "frozen-random", None)
    assert (training.learning_rate, training.head_learning_rate, training.epochs, training.patience,
            training.selection, training.batch_size, training.warmup_ratio) == (1e-5, None, 25, 5, "best", 16, 0.1)
    stages = {s.name: s for s in run.stages}
    adapter = stages["mop-adapter-0"].config
    assert (adapter.training.learning_rate, adapter.training.batch_size, adapter.training.warmup_ratio,
            adapter.training.epochs, adapter.kg.max_length, adapter.entity_head) == (1e-4, 256, 0.0, 1, 64,
                                                                                    "frozen-random")
    assert stages["mop-finetune"].config.training.learning_rate == 1e-5
    assert stages["mop-finetune"].config.training.patience == 5
    assert stages["mop-finetune"].config.regularization is False  # the reference adds no fusion regulariser
    assert stages["mop-finetune"].config.mixture.model_dump() == {"mixture": "softmax", "tau": 0.5, "top_k": 2,
                                                                  "loss_coef": 0.01}
    # a task's recommended head rate does not reach the paper's one-rate fine-tune
    protocol, _ = apply_protocol(build_spec({**data, "protocol": "paper"}), MopStrategy.protocols["paper"])
    recommended, applied = apply_recommended(protocol, {"training": {"head_learning_rate": 2e-2, "epochs": 1}})
    assert recommended.training.head_learning_rate is None and recommended.training.epochs == 25 and not applied


@pytest.mark.slow
def test_one_adapter_alone_runs_end_to_end_without_a_mixture(tmp_path, textcls_dir, kg_file):
    from kinject.engine import execute
    from kinject.plugins.mop.fusion import load_fused_model

    run = prepared(tmp_path, textcls_dir, kg_file, adapters_used=[1])
    metrics = execute(run, tmp_path / "run")
    out = tmp_path / "run"
    assert metrics["comparison"]["other_name"] == "mop/names+part-1" and set(metrics["test"]) == {"accuracy",
                                                                                                   "f1_macro"}
    assert [p["part"] for p in json.loads((out / "partition-adapters.json").read_text())["parts"]] == [1]
    assert not (out / "mixture.json").exists()
    assert json.loads((out / "model" / "config.json").read_text())["mop"]["adapters"] == ["part-1"]
    model = load_fused_model(out / "model", run.task.head(run.env).kind)
    assert str(model.active_adapters) == "Stack[part-1]"
    assert not any("adapter_fusion_layer" in name for name, _ in model.named_parameters())
