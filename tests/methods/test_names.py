"""Names that say what ran (issue #53): every strategy names its arm by its variant (``kimera`` is KIMERA's hard mask,
``kimera/no-mask`` its ablation), and no grid file of benchmarks/grids/ gives an arm a name that hides its variant."""

from __future__ import annotations

from pathlib import Path

import pytest

GRIDS = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "grids").glob("*.yaml"))


def label(name: str, **settings) -> str:
    from kinject.api import registry

    cls = registry("strategies").get(name)
    return cls.label(cls.Config(**settings))


@pytest.mark.parametrize("name, settings, expected", [
    ("kimera", {}, "kimera"),
    ("kimera", {"variant": "hard"}, "kimera"),
    ("kimera", {"variant": "no-mask"}, "kimera/no-mask"),
    ("kimera", {"variant": "random"}, "kimera/random"),
    ("kimera", {"mask": "soft"}, "kimera/hard+masksoft"),
    ("mop", {"entity_head": "frozen-random"}, "mop"),  # the paper's objective
    ("mop", {}, "mop/names"),  # kinject's default head: fact-storing names
    ("mop", {"entity_head": "names"}, "mop/names"),
    ("mop", {"entity_head": "linear", "mixture": "gumbel"}, "mop/linear+gumbel"),
    ("mop", {"partitions": 4, "adapters_used": [1], "entity_head": "frozen-random"}, "mop/part-1"),
    ("mop", {"partitions": 4, "adapters_used": [2, 0]}, "mop/names+parts-0-2"),
    ("doktra", {}, "doktra"),
    ("doktra", {"variant": "kd"}, "doktra/kd"),
    ("pretrain", {}, "pretrain"),
    ("pretrain", {"mlm_corpus": "general"}, "pretrain/general"),
    ("pretrain", {"init": "scratch", "mask_unit": "token"}, "pretrain/scratch+token"),
    ("context", {}, "context"),
    ("context", {"form": "lookup"}, "context/lookup"),
    ("stilt", {"intermediate": ["ddi", "hoc"]}, "stilt/ddi+hoc"),
    ("finetune", {}, "finetune"),
])
def test_each_strategy_names_its_arm_by_its_variant(name, settings, expected):
    assert label(name, **settings) == expected


def test_a_strategy_without_variants_is_named_by_its_name():
    from kinject.api import Strategy

    class Plain(Strategy):
        pass

    Plain.name = "plain"
    assert Plain.label(None) == "plain"


def test_every_registered_strategy_has_a_label():
    from kinject.api import registry

    for name in registry("strategies").names():
        cls = registry("strategies").get(name)
        assert callable(getattr(cls, "label", None)), f"{name}: no label(config)"


def hidden(cell) -> str | None:
    """What the cell's arm name hides: a part of its variant (the strategy's label after the ``/``, parts joined by
    ``+``) missing from the arm's name, else None. The method's own name may be left out (a STILT matrix names its
    arms by their intermediate task)."""
    from kinject.api import registry

    strategy = dict(cell.data["strategy"])
    cls = registry("strategies").get(strategy.pop("name"))
    protocol = cls.protocols.get(cell.data.get("protocol") or "", {}).get("strategy", {})
    name = cls.label(cls.Config.model_validate({**protocol, **strategy}))  # a protocol's settings, under the cell's
    missing = [part for part in name.partition("/")[2].split("+") if part and part not in cell.strategy]
    return f"{cell.strategy!r} runs {name!r} (its name lacks {', '.join(missing)})" if missing else None


@pytest.mark.parametrize("path", GRIDS, ids=[path.stem for path in GRIDS])
def test_no_grid_arm_hides_its_variant(path, tmp_path):
    from kinject.experiments.grid import load_grid

    grid = load_grid(path, output=tmp_path / "out")
    problems = sorted({problem for cell in grid.cells if (problem := hidden(cell))})
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_the_check_catches_kimera_running_no_mask(tmp_path):
    from kinject.experiments.grid import load_grid

    grid_file = tmp_path / "bad.yaml"
    grid_file.write_text("tasks: [hpo-isa]\nstrategies:\n  kimera-isa: {name: kimera, settings: "
                         "{strategy.variant: no-mask}}\n  kimera-no-mask: {name: kimera, settings: "
                         "{strategy.variant: no-mask}}\n")
    problems = [hidden(cell) for cell in load_grid(grid_file, output=tmp_path / "out").cells]
    assert problems[0] == "'kimera-isa' runs 'kimera/no-mask' (its name lacks no-mask)"
    assert problems[1] is None
