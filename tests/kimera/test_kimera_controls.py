"""KIMERA's controls for experiments: the random-mask arm, scoring samples (score_seed) and mask overlap, a given
mask (mask_file), the mask search alone (until: mask) and one retraining shared by several run seeds
(retrain_seed). Shared helpers (a small KG, a prepared tiny run, stage keys) are imported by
test_kimera_heldout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import PROBE_STAGES
import torch

from kinject.errors import DataError, SpecError
from kinject.plugins.kimera.masks import random_hard_mask, redundant_heads, redundant_overlap, save_masks
from kinject.plugins.kimera.scoring import choose_examples, draw_examples

from test_kimera_retrain import snapshot
from test_kimera_strategy import config

ENTITIES = ["disease", "gene", "protein", "cell", "drug", "cancer", "chemical", "treatment", "dose", "patients"]
RELATIONS = ["causes", "associated", "effect"]
KG_ROWS = [(ENTITIES[i], RELATIONS[i % 3], ENTITIES[(i * 3 + 1) % 10]) for i in range(10) if i != (i * 3 + 1) % 10] + \
    [(ENTITIES[i], RELATIONS[(i + 1) % 3], ENTITIES[(i + 5) % 10]) for i in range(10)]
HARD = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])  # 4 of the tiny model's 8 heads redundant


def run_spec(tmp_path: Path, textcls_dir: Path, seed: int = 42, **strategy) -> dict:
    """A tiny KIMERA run on textcls with a 19-triple KG (kg.tsv, duplicates included) and short budgets."""
    kg = tmp_path / "kg.tsv"
    if not kg.exists():  # written once: its mtime is part of the source's fingerprint
        kg.write_text("".join("\t".join(row) + "\n" for row in KG_ROWS + KG_ROWS[:2]))
    return {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(textcls_dir)},
            "strategy": {"name": "kimera", "kg_steps": 4, "kg_batch_size": 4, "kg_max_length": 32, **strategy},
            "sources": [{"name": "triples", "path": str(kg)}], "seed": seed,
            "training": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3},
            "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)}


def prepared(tmp_path: Path, textcls_dir: Path, seed: int = 42, **strategy):
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    return prepare(build_spec(run_spec(tmp_path, textcls_dir, seed, **strategy)))


def keys(run) -> dict[str, str]:
    from kinject.keys import plan

    return {p.stage.name: p.key for p in plan(run)}


def stage_dirs(run_dir: Path) -> dict[str, Path]:
    return {s["name"]: Path(s["dir"]) for s in json.loads((run_dir / "run.json").read_text())["stages"]}


def mask_file(folder: Path, hard: torch.Tensor = HARD) -> Path:
    path = folder / "given" / "masks.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_masks(path, hard=hard, importance=torch.linspace(0, 1, hard.numel()).view(hard.shape))
    return path


# -- random mask ------------------------------------------------------------------------------------ #
def test_random_mask_has_the_searched_count_is_seeded_and_moves_heads():
    draws = {seed: random_hard_mask(HARD, seed) for seed in range(10)}
    for mask in draws.values():
        assert mask.shape == HARD.shape and set(mask.unique().tolist()) == {0.0, 1.0}
        assert len(redundant_heads(mask)) == len(redundant_heads(HARD)) == 4
    assert torch.equal(random_hard_mask(HARD, 3), draws[3])  # deterministic for a seed
    assert any(redundant_heads(m) != redundant_heads(HARD) for m in draws.values())  # not the searched mask
    assert len({frozenset(redundant_heads(m)) for m in draws.values()}) > 2  # seeds place the heads differently
    assert torch.equal(random_hard_mask(torch.ones(2, 4), 0), torch.ones(2, 4))  # nothing redundant, nothing drawn


def test_random_variant_plans_its_own_mask_stage_after_the_search(tmp_path, textcls_dir, tiny_model):
    run = prepared(tmp_path, textcls_dir, variant="random", mask_seed=5)
    stages = {s.name: s for s in run.stages}
    assert [s.name for s in run.stages] == ["finetune", "evaluate", "kimera-mask-hard", "kimera-search-report",
                                            "kimera-mask-random", "kimera-retrain", "kimera-finetune",
                                            "kimera-evaluate", "kimera-report", "kimera-compare", *PROBE_STAGES]
    assert stages["kimera-mask-random"].inputs == ("kimera-mask-hard",)
    retrain = stages["kimera-retrain"]
    assert retrain.inputs == ("kimera-mask-random",) and retrain.config.mask == "hard"
    assert retrain.config.mask_stage == "kimera-mask-random"
    assert stages["kimera-report"].inputs == ("kimera-mask-random", "kimera-finetune")
    first, other = keys(run), keys(prepared(tmp_path, textcls_dir, variant="random", mask_seed=6))
    assert first["kimera-mask-hard"] == other["kimera-mask-hard"]  # the search does not depend on mask_seed
    assert first["kimera-mask-random"] != other["kimera-mask-random"]
    assert first["kimera-retrain"] != other["kimera-retrain"]
    hard = {s.name: s for s in prepared(tmp_path, textcls_dir, variant="hard").stages}["kimera-retrain"]
    assert hard.inputs == ("kimera-mask-hard",) and hard.config.mask_stage == "kimera-mask-hard"


@pytest.mark.slow
def test_random_variant_retrains_exactly_the_randomly_chosen_heads(tmp_path, textcls_dir, tiny_model):
    """mask_file gives the 'searched' mask; the random stage re-draws as many heads; retraining freezes every
    other head bit-exactly and moves the drawn ones."""
    from transformers import AutoModel

    from kinject.engine import execute

    run = prepared(tmp_path, textcls_dir, variant="random", mask_seed=1, mask_file=str(mask_file(tmp_path)))
    execute(run, tmp_path / "run")
    dirs = stage_dirs(tmp_path / "run")
    drawn = json.loads((tmp_path / "run" / "random.json").read_text())
    mask = torch.tensor(drawn["hard"])
    assert torch.equal(mask, random_hard_mask(HARD, 1)) and drawn["redundant"] == drawn["searched_redundant"] == 4
    assert redundant_heads(mask) != redundant_heads(HARD)  # seed 1 moves heads: the test tells the masks apart
    assert torch.equal(torch.tensor(json.loads((tmp_path / "run" / "masks.json").read_text())["hard"]), HARD)
    base = snapshot(AutoModel.from_pretrained(tiny_model))
    after = snapshot(AutoModel.from_pretrained(dirs["kimera-retrain"] / "model"))
    for (layer, head), slices in base.items():
        for name, old in slices.items():
            assert torch.equal(after[(layer, head)][name], old) == bool(mask[layer, head] == 1), (layer, head, name)


# -- scoring samples and mask overlap ------------------------------------------------------------ #
def test_draw_examples_keeps_groups_whole_and_none_keeps_the_split_order():
    examples = [{"group": f"q{g}", "i": i} for g in range(10) for i in range(3)]
    assert draw_examples(examples, None) == examples
    assert choose_examples(draw_examples(examples, None), 6) == examples[:6]  # today's behaviour
    chosen = {seed: choose_examples(draw_examples(examples, seed), 6) for seed in (0, 1, 2)}
    for rows in chosen.values():
        groups = [r["group"] for r in rows]
        assert len(rows) == 6 and len(set(groups)) == 2  # two whole queries, same size for every seed
        assert all([r["i"] for r in rows if r["group"] == g] == [0, 1, 2] for g in set(groups))
    assert len({tuple(r["group"] for r in rows) for rows in chosen.values()}) > 1
    assert draw_examples(examples, 1) == draw_examples(examples, 1)
    plain = [{"text": str(i)} for i in range(20)]
    assert sorted(draw_examples(plain, 4), key=lambda r: int(r["text"])) == plain != draw_examples(plain, 4)


def test_score_seed_draws_other_scoring_sets_of_the_same_size(textcls_dir, tiny_model, tmp_path):
    from kinject.interfaces import Environment
    from kinject.api import load_tokenizer
    from kinject.plugins.kimera.scoring import build_scoring_set
    from kinject.tasks.textcls import TextClassificationTask

    task = TextClassificationTask(path=str(textcls_dir))
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    tokenizer = load_tokenizer(tiny_model)
    drawn = {seed: build_scoring_set(task, env, "dev", 6, tokenizer, 64, 4, seed=seed) for seed in (None, 1, 2, 3)}
    assert drawn[None].examples == task.examples("dev", env)[:6]  # None: the first examples, as before
    ids = {seed: [ex["id"] for ex in chosen.examples] for seed, chosen in drawn.items()}
    assert all(len(chosen.examples) == len(chosen.features) == 6 for chosen in drawn.values())
    assert len({tuple(v) for v in ids.values()}) == 4  # every seed another sample
    assert ids[1] == [ex["id"] for ex in build_scoring_set(task, env, "dev", 6, tokenizer, 64, 4, seed=1).examples]


def test_score_seed_reaches_the_mask_and_analysis_stages(tmp_path, textcls_dir, tiny_model):
    run = prepared(tmp_path, textcls_dir, variant="hard", score_seed=3)
    stages = {s.name: s for s in run.stages}
    assert stages["kimera-mask-hard"].config.scoring.seed == 3 == stages["kimera-report"].config.scoring.seed
    assert keys(run)["kimera-mask-hard"] != keys(prepared(tmp_path, textcls_dir, variant="hard"))["kimera-mask-hard"]
    assert prepared(tmp_path, textcls_dir).stages[2].config.scoring.seed is None


def test_redundant_overlap_of_hand_made_masks(tmp_path):
    files = []
    for i, zeros in enumerate([[(0, 1), (0, 3), (1, 0)], [(0, 1), (1, 0), (1, 3)], [(0, 1), (1, 2)]]):
        mask = torch.ones(2, 4)
        for layer, head in zeros:
            mask[layer, head] = 0
        files.append(tmp_path / f"m{i}.json")
        save_masks(files[-1], hard=mask)
    out = redundant_overlap(files)
    assert out["counts"] == [3, 3, 2] and out["heads"] == 8
    assert out["intersection"] == 1 and out["union"] == 5  # {(0,1)} and {(0,1),(0,3),(1,0),(1,2),(1,3)}
    assert out["jaccard"] == {"0-1": pytest.approx(2 / 4), "0-2": pytest.approx(1 / 4), "1-2": pytest.approx(1 / 4)}
    both = 3 * 3 / 8
    assert out["chance_jaccard"]["0-1"] == pytest.approx(both / (6 - both))
    save_masks(tmp_path / "none.json", hard=torch.ones(2, 4))
    empty = redundant_overlap([tmp_path / "none.json", tmp_path / "none.json"])
    assert empty["jaccard"] == {"0-1": 1.0} and empty["union"] == 0
    save_masks(tmp_path / "big.json", hard=torch.ones(3, 4))
    with pytest.raises(DataError, match="different shapes"):
        redundant_overlap([files[0], tmp_path / "big.json"])


# -- a given mask, the search alone, one retraining for several seeds ---------------------------------- #
def test_until_mask_runs_phase1_and_the_mask_search_only(tmp_path, textcls_dir, tiny_model):
    from kinject.engine import execute

    run = prepared(tmp_path, textcls_dir, variant="hard", until="mask", score_examples=8, score_seed=1)
    assert [s.name for s in run.stages] == ["finetune", "kimera-mask-hard", "kimera-search-report"]
    assert execute(run, tmp_path / "run") == {}
    search = json.loads((tmp_path / "run" / "search.json").read_text())  # the search report's
    assert search["examples"] == 8 and all("ci_low" in r for r in search["rounds"][1:])
    assert torch.tensor(json.loads((tmp_path / "run" / "masks.json").read_text())["hard"]).shape == (2, 4)
    random_only = prepared(tmp_path, textcls_dir, variant="random", until="mask")
    assert [s.name for s in random_only.stages] == ["finetune", "kimera-mask-hard", "kimera-search-report",
                                                    "kimera-mask-random"]


def test_retrain_seed_shares_one_retraining_across_run_seeds(tmp_path, textcls_dir, tiny_model):
    fixed = {seed: keys(prepared(tmp_path, textcls_dir, seed, variant="no-mask", retrain_seed=42)) for seed in (42, 43)}
    assert fixed[42]["kimera-retrain"] == fixed[43]["kimera-retrain"]
    assert fixed[42]["kimera-finetune"] != fixed[43]["kimera-finetune"]
    assert fixed[42]["finetune"] != fixed[43]["finetune"]
    plain = {seed: keys(prepared(tmp_path, textcls_dir, seed, variant="no-mask")) for seed in (42, 43)}
    assert plain[42]["kimera-retrain"] != plain[43]["kimera-retrain"]  # default: the run seed
    run = prepared(tmp_path, textcls_dir, 43, variant="no-mask", retrain_seed=42)
    assert {s.name: s for s in run.stages}["kimera-retrain"].config.seed == 42


def test_a_given_mask_is_keyed_by_its_values_so_tasks_and_seeds_share_the_retraining(tmp_path, textcls_dir,
                                                                                        tiny_model):
    """mask_file + retrain_seed: one kimera-mask-hard and one kimera-retrain for two seeds and two tasks (the
    experiment's (a) and (b) evaluations), while phase 3 differs."""
    from conftest import write_textcls

    given = str(mask_file(tmp_path))
    other_task = write_textcls(tmp_path / "other", seed=1)
    runs = [prepared(tmp_path, textcls_dir, 42, mask_file=given, retrain_seed=42),
            prepared(tmp_path, textcls_dir, 43, mask_file=given, retrain_seed=42),
            prepared(tmp_path, other_task, 42, mask_file=given, retrain_seed=42)]
    planned = [keys(run) for run in runs]
    assert len({k["kimera-mask-hard"] for k in planned}) == 1 and len({k["kimera-retrain"] for k in planned}) == 1
    assert len({k["kimera-finetune"] for k in planned}) == 3
    stage = {s.name: s for s in runs[0].stages}["kimera-mask-hard"]
    assert stage.config.masks["hard"] == HARD.tolist() and stage.inputs == ()
    moved = mask_file(tmp_path / "elsewhere")  # same values, another file: same key
    assert keys(prepared(tmp_path, textcls_dir, mask_file=str(moved.parent)))["kimera-mask-hard"] == \
        keys(prepared(tmp_path, textcls_dir, mask_file=given))["kimera-mask-hard"]
    flipped = mask_file(tmp_path / "flipped", 1 - HARD)
    assert keys(prepared(tmp_path, textcls_dir, mask_file=str(flipped)))["kimera-mask-hard"] != \
        planned[0]["kimera-mask-hard"]


def test_bad_control_settings_fail_before_any_stage(tmp_path, textcls_dir, tiny_model):
    for options, needle in (({"variant": "random", "mask": "soft"}, "random variant draws a hard mask"),
                            ({"variant": "no-mask", "until": "mask"}, "until: variant 'no-mask' uses no head mask"),
                            ({"variant": "finetune", "score_seed": 1}, "score_seed: variant 'finetune'"),
                            ({"variant": "finetune", "retrain_seed": 1}, "retrain_seed only apply"),
                            ({"variant": "pruned", "kg_heldout": 5}, "kg_heldout only apply"),
                            ({"mask_file": "m.json", "until": "mask"}, "mask_file: the mask is given"),
                            ({"mask_file": "m.json", "score_seed": 2}, "no mask search for score_seed"),
                            ({"kg_heldout": 5, "alphas": {"relation": 0, "triplet": 0}}, "kg_heldout: the held-out")):
        with pytest.raises(SpecError, match=needle):
            config(**options)
    with pytest.raises(SpecError, match="strategy.mask_file: .*nope.json is neither"):
        prepared(tmp_path, textcls_dir, mask_file=str(tmp_path / "nope.json"))
    with pytest.raises(DataError, match=r"strategy.mask_file: mask 'hard' has shape \(3, 4\), expected \(2, 4\)"):
        prepared(tmp_path, textcls_dir, mask_file=str(mask_file(tmp_path / "big", torch.ones(3, 4))))
    save_masks(tmp_path / "bare.json", hard=HARD)
    with pytest.raises(DataError, match="no mask 'importance'.*strategy.analysis=false"):
        prepared(tmp_path, textcls_dir, mask_file=str(tmp_path / "bare.json"))
    assert keys(prepared(tmp_path, textcls_dir, mask_file=str(tmp_path / "bare.json"), analysis=False))
    assert not (tmp_path / "cache" / "stages").exists()  # nothing ran


@pytest.mark.slow
def test_cli_reports_a_bad_control_in_one_line_with_exit_2(tmp_path, textcls_dir, tiny_model):
    from helpers import assert_user_error, cli

    spec = run_spec(tmp_path, textcls_dir)
    result = cli("run", "kimera", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                 "--set", "sources.0.name=triples", "--set", f"sources.0.path={spec['sources'][0]['path']}",
                 "--set", "strategy.variant=no-mask", "--set", "strategy.kg_heldout=25",
                 "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "o"))
    assert_user_error(result, "strategy.kg_heldout: 25 held-out triples leave none", "20 distinct triples")
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache" / "stages").exists()


@pytest.mark.slow
def test_repeats_with_a_fixed_retrain_seed_retrain_once(tmp_path, textcls_dir, tiny_model, capsys):
    """`--repeats 2` with retrain_seed: the second seed finds kimera-retrain in the cache and fine-tunes anew
    (and the CLI prints the seed summary, comparison included)."""
    from helpers import run_kinject

    spec = run_spec(tmp_path, textcls_dir)
    args = ["run", "kimera", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "sources.0.name=triples", "--set", f"sources.0.path={spec['sources'][0]['path']}",
            "--set", "strategy.variant=no-mask", "--set", "strategy.retrain_seed=7", "--set", "strategy.kg_steps=2",
            "--set", "training.epochs=1", "--set", "model.max_length=32", "--seed", "42", "--repeats", "2",
            "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "runs")]
    assert run_kinject(*args) == 0
    out = capsys.readouterr().out
    assert "kimera/no-mask vs finetune on test " in out and "(paired, per seed)" in out
    first, second = (json.loads((tmp_path / "runs" / f"seed-{s}" / "run.json").read_text())["stages"] for s in (42, 43))
    first, second = ({s["name"]: s for s in stages} for stages in (first, second))
    assert first["kimera-retrain"]["key"] == second["kimera-retrain"]["key"] and second["kimera-retrain"]["cached"]
    assert first["kimera-finetune"]["key"] != second["kimera-finetune"]["key"]
    assert not second["kimera-finetune"]["cached"]
