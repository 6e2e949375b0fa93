"""`kinject push` (the hub plugin), offline against a mocked ``HfApi``: the card's text and metadata, the exact files
sent for a finetune run and for a MoP run on the tiny model (adapters and fusion in the adapters library's format),
the dry run, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_kinject
from helpers import write_kg

from conftest import write_textcls


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A MoP run (with its finetune baseline and paired comparison) and a finetune run on one cache."""
    root = tmp_path_factory.mktemp("hub")
    data, kg = write_textcls(root / "data"), write_kg(root / "kg.tsv")
    common = ["--task", "textcls", "--model", "tiny", "--set", f"task.path={data}", "--set", "model.max_length=32",
              "--set", "training.epochs=1", "--set", "training.batch_size=8", "--set", "hooks.knowledge-probe.enabled=false",
              "--cache-dir", str(root / "cache")]
    assert run_kinject("run", "mop", *common, "--set", f"sources=[{{name: triples, path: {kg}}}]",
                       "--set", "strategy.partitions=3", "--set", "strategy.adapter_epochs=1",
                       "--set", "strategy.adapter_batch_size=16", "--set", "strategy.analysis=false",
                       "-o", str(root / "mop")) == 0
    assert run_kinject("run", "finetune", *common, "-o", str(root / "finetune")) == 0
    return {"mop": root / "mop", "finetune": root / "finetune"}


class FakeApi:
    """Records what ``kinject push`` asks of the Hub; ``fail`` makes ``create_commit`` raise it."""

    calls: list = []
    fail: Exception | None = None

    def __init__(self, token=None):
        self.calls.append(("init", token))

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))
        return f"https://huggingface.co/{repo_id}"

    def create_branch(self, repo_id, **kw):
        self.calls.append(("create_branch", repo_id, kw))

    def create_commit(self, repo_id, operations, **kw):
        if self.fail is not None:
            raise self.fail
        self.calls.append(("create_commit", repo_id, list(operations), kw))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()


@pytest.fixture
def hub(monkeypatch):
    """The Hub mocked and reachable: a token, not offline."""
    import kinject.plugins.hub.push as push

    FakeApi.calls, FakeApi.fail = [], None
    monkeypatch.setattr(push, "HfApi", FakeApi)
    monkeypatch.setattr(push, "get_token", lambda: "hf_test")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return FakeApi


def sent(api) -> dict[str, bytes]:
    """repo path -> bytes of the one commit pushed."""
    commits = [call for call in api.calls if call[0] == "create_commit"]
    assert len(commits) == 1
    out = {}
    for op in commits[0][2]:
        content = op.path_or_fileobj
        out[op.path_in_repo] = content if isinstance(content, bytes) else Path(content).read_bytes()
    return out


def card_of(content: bytes):
    from huggingface_hub import ModelCard

    return ModelCard(content.decode())


@pytest.mark.slow
def test_finetune_push_sends_model_and_card_in_one_commit(runs, hub, capsys):
    run = runs["finetune"]
    code = run_kinject("push", str(run), "--repo-id", "you/ft-textcls", "--private", "--revision", "exp",
                       "--commit-message", "first", "--license", "mit")
    assert code == 0, capsys.readouterr().err
    assert ("create_repo", "you/ft-textcls", {"private": True, "exist_ok": True}) in hub.calls
    assert ("create_branch", "you/ft-textcls", {"branch": "exp", "exist_ok": True}) in hub.calls
    commit = next(call for call in hub.calls if call[0] == "create_commit")
    assert commit[3] == {"commit_message": "first", "revision": "exp"}
    files = sent(hub)
    model = {p.name: p.read_bytes() for p in (run / "model").iterdir()}
    assert set(files) == {"README.md", *model} and "model.safetensors" in model
    assert all(files[name] == data for name, data in model.items())
    assert "https://huggingface.co/you/ft-textcls/commit/abc" in capsys.readouterr().out

    card = card_of(files["README.md"])
    data, text = card.data.to_dict(), card.text
    info = json.loads((run / "run.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert data["library_name"] == "transformers" and data["tags"] == ["kinject", "finetune", "biomedical"]
    assert data["language"] == ["en"] and data["license"] == "mit"  # tiny has no licence of its own: --license's
    assert data["pipeline_tag"] == "text-classification" and "base_model" not in data  # tiny is not on the Hub
    result = data["model-index"][0]["results"][0]  # your own data: named after its folder, of type custom
    assert result["dataset"] == {"name": "data", "type": "custom", "split": "dev"} and "datasets" not in data
    assert all(f"{value:.4f}" in text for split in ("dev", "test") for value in metrics[split].values())
    assert " ".join(info["command"][:3]) == "kinject run finetune" and "kinject run finetune --task textcls" in text
    assert f"| git sha | `{info['git_sha']}` |" in text and "| seed | `42` |" in text
    assert f"| transformers | `{info['versions']['transformers']}` |" in text
    assert f"| test | {metrics['test']['accuracy']:.4f} |" in text
    assert "none (the strategy reads no knowledge source)" in text and "Compared with the baseline" not in text
    assert 'AutoModelForSequenceClassification.from_pretrained("you/ft-textcls")' in text


def test_mop_push_sends_partition_adapters_and_fusion_in_the_adapters_format(runs, hub, capsys):
    import adapters
    import torch
    from adapters import Fuse
    from transformers import AutoModelForSequenceClassification

    from kinject.plugins.mop.fusion import load_fused_model

    run = runs["mop"]
    assert run_kinject("push", str(run), "--repo-id", "you/mop-textcls", "--license", "mit") == 0, \
        capsys.readouterr().err
    files = sent(hub)
    info = json.loads((run / "run.json").read_text())
    stages = {s["name"]: Path(s["dir"]) for s in info["stages"]}
    parts = [f"part-{i}" for i in range(3)]
    expected = {"README.md", *(p.name for p in (run / "model").iterdir()),
                *(f"adapters/{p}/{f}" for p in parts for f in ("adapter.safetensors", "adapter_config.json")),
                *(f"finetuned-adapters/{p}/{f}" for p in parts for f in ("adapter.safetensors", "adapter_config.json")),
                "fusion/adapter_fusion_config.json", "fusion/model_adapter_fusion.safetensors", "fusion/mop.json"}
    assert set(files) == expected
    for i, part in enumerate(parts):  # the partition adapters exactly as their stages saved them
        folder = stages[f"mop-adapter-{i}"] / "adapter"
        assert files[f"adapters/{part}/adapter.safetensors"] == (folder / "adapter.safetensors").read_bytes()
        assert json.loads(files[f"adapters/{part}/adapter_config.json"])["name"] == part
    assert json.loads(files["fusion/mop.json"]) == {"adapters": parts, "mixture": "softmax", "tau": 0.5,
                                                    "top_k": 2, "loss_coef": 0.01, "joint": True}

    # the task model's encoder + head, plus the published adapters and fusion, score like the task model
    hub_dir = run.parent / "from-hub"
    for path, content in files.items():
        (hub_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (hub_dir / path).write_bytes(content)
    model = AutoModelForSequenceClassification.from_pretrained(str(hub_dir))
    adapters.init(model)
    for part in parts:
        model.load_adapter(str(hub_dir / "finetuned-adapters" / part), load_as=part, use_safetensors=True)
    model.load_adapter_fusion(str(hub_dir / "fusion"), use_safetensors=True)
    model.set_active_adapters(Fuse(*parts))
    reference = load_fused_model(run / "model")
    ids = torch.tensor([[2, 7, 8, 9, 10, 3]])
    with torch.no_grad():
        assert torch.allclose(model.eval()(input_ids=ids).logits, reference(input_ids=ids).logits, atol=1e-6)

    card = card_of(files["README.md"])
    data, text = card.data.to_dict(), card.text
    comparison = json.loads((run / "metrics.json").read_text())["comparison"]
    assert data["tags"] == ["kinject", "mop", "biomedical", "adapters"]
    assert "### Strategy settings (`mop`)" in text and "| partitions | `3` |" in text
    assert f"`triples` (path={run.parent / 'kg.tsv'}" in text
    row = (f"| test | accuracy | finetune {comparison['baseline']:.4f} | {comparison['other_name']} "
           f"{comparison['other']:.4f} | {comparison['difference']:+.4f} | 95% [{comparison['ci_low']:+.4f}, "
           f"{comparison['ci_high']:+.4f}] (percentile, 2000 resamples) | 16 |")
    assert row in text
    assert "* `adapters/` (" in text and "* `fusion/` (" in text and "kinject's `mop` strategy to load" in text


@pytest.mark.slow
def test_dry_run_writes_the_card_beside_run_json_lists_the_files_and_needs_no_network(runs, monkeypatch, capsys):
    import kinject.plugins.hub.push as push

    def no_network(*args, **kwargs):
        raise AssertionError("a dry run reached the Hub")

    monkeypatch.setattr(push, "HfApi", no_network)
    monkeypatch.setattr(push, "get_token", lambda: None)  # no token needed either
    run = runs["finetune"]
    assert run_kinject("push", str(run), "--repo-id", "you/ft-textcls", "--dry-run") == 0
    out = capsys.readouterr().out
    card = (run / "README.md").read_text()
    assert out.startswith("dry run, nothing uploaded: you/ft-textcls would get 6 files")
    assert card.startswith("---\nlanguage:\n- en\nlibrary_name: transformers\n")
    for path in (run / "model").iterdir():
        assert f"  {path.name} " in out
    assert "  README.md " in out
    # kinject compare still reads the run folder with the card in it
    assert run_kinject("compare", str(run), str(runs["mop"])) == 0
    assert "finetune" in capsys.readouterr().out


def test_card_metadata_names_hub_base_models_and_datasets_and_shows_the_probe(tmp_path):
    from huggingface_hub import ModelCard

    from kinject.plugins.hub.push import publish

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text(json.dumps({"architectures": ["BertForTokenClassification"]}))
    from safetensors.torch import save_file
    import torch

    save_file({"w": torch.zeros(2)}, str(run / "model" / "model.safetensors"))  # whole weights (push checks them)
    info = {"spec": {"model": {"name": "minilm"}, "task": {"name": "ncbi-disease"},
                     "strategy": {"name": "kimera", "variant": "hard"}, "sources": [], "training": {"limit": 64}},
            "command": ["kinject", "run", "kimera", "--task", "ncbi-disease", "--model", "minilm", "--limit", "64"],
            "seed": 3, "git_sha": "abc123", "versions": {"torch": "2.5"}, "model_path": "/somewhere/minilm"}
    (run / "run.json").write_text(json.dumps(info))
    (run / "metrics.json").write_text(json.dumps({"test": {"entity_f1": 0.5}, "train": {"train_loss": 1.0}}))
    (run / "probe.json").write_text(json.dumps({"model": {"auroc": 0.7, "accuracy": 0.6},
                                                "base": {"auroc": 0.6, "accuracy": 0.55}, "chance": 0.5}))
    found = publish(run, "you/kimera-ncbi", dry_run=True)
    assert found.card_path == run / "README.md" and [p for p, _ in found.listing()] == [
        "README.md", "config.json", "model.safetensors"]
    card = ModelCard.load(run / "README.md")
    data = card.data.to_dict()
    assert data["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and data["datasets"] == ["bigbio/blurb"]
    assert data["pipeline_tag"] == "token-classification"
    result = data["model-index"][0]["results"][0]
    assert result["dataset"] == {"name": "ncbi-disease", "type": "bigbio/blurb", "config": "ncbi_disease",
                                 "split": "test"}
    assert result["metrics"] == [{"type": "f1", "value": 0.5, "name": "entity_f1"}]  # the Hub's id, kinject's name
    assert data["license"] == "apache-2.0" and data["language"] == ["en"]  # minilm's licence
    from huggingface_hub.repocard_data import model_index_to_eval_results

    name, results = model_index_to_eval_results(data["model-index"])  # the Hub's own parser reads it back
    assert name == "kimera-ncbi" and results[0].metric_type == "f1" and results[0].dataset_type == "bigbio/blurb"
    assert "/somewhere" not in card.text  # no path of the machine that ran it
    assert "| this model | 0.7000 | 0.6000 |" in card.text and "| gain | +0.1000 | +0.0500 |" in card.text
    assert "trained and evaluated on the first 64 examples per split" in card.text
    assert "kinject's embedded Human Phenotype Ontology graph" in card.text  # KIMERA's default source
    assert "strategy (" in card.text and " as `kimera`" not in card.text  # the hard variant is KIMERA itself
    info["spec"]["strategy"]["variant"] = "no-mask"  # the ablation: the card says which arm ran
    (run / "run.json").write_text(json.dumps(info))
    ablation = ModelCard(str(publish(run, "you/x", dry_run=True).card)).text
    assert "strategy" in ablation and " as `kimera/no-mask` on the `ncbi-disease` task" in ablation
    assert [line for line in ablation.splitlines() if line.startswith("| arm |") and "kimera/no-mask" in line]
    info["spec"]["strategy"]["variant"] = "hard"
    # a Hub id as the model name is the base model; a local folder is not
    info["spec"]["model"]["name"] = info["model_path"] = "dmis-lab/biobert-v1.1"
    (run / "run.json").write_text(json.dumps(info))
    assert ModelCard(str(publish(run, "you/x", dry_run=True).card)).data.base_model == "dmis-lab/biobert-v1.1"
    info["spec"]["model"]["name"], info["model_path"] = "../models/mine", "/abs/models/mine"
    (run / "run.json").write_text(json.dumps(info))
    assert ModelCard(str(publish(run, "you/x", dry_run=True).card)).data.base_model is None


@pytest.mark.parametrize("case,message", [
    ("offline", "error: HF_HUB_OFFLINE is set: pushing needs the network (unset it, or use --dry-run)"),
    ("no-token", "error: no Hugging Face token: log in (`hf auth login`) or set HF_TOKEN"),
    ("not-a-run", "not a run folder (no run.json)"),
    ("bad-repo", "error: --repo-id 'you/a b':"),
    ("hub-refuses", "error: push to you/ft failed: 403 Forbidden: you cannot write to this repository"),
])
def test_what_cannot_be_pushed_is_one_line_exit_2_and_nothing_is_sent(runs, hub, monkeypatch, capsys, tmp_path,
                                                                      case, message):
    import kinject.plugins.hub.push as push

    run, repo = str(runs["finetune"]), "you/ft"
    if case == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    elif case == "no-token":
        monkeypatch.setattr(push, "get_token", lambda: None)
    elif case == "not-a-run":
        run = str(tmp_path)
    elif case == "bad-repo":
        repo = "you/a b"
    else:
        from huggingface_hub.errors import HfHubHTTPError

        hub.fail = HfHubHTTPError("403 Forbidden: you cannot write to this repository\nmore detail")
    assert run_kinject("push", run, "--repo-id", repo, "--license", "mit") == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not [call for call in hub.calls if call[0] == "create_commit"]
