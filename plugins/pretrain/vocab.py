"""The in-domain vocabulary: an uncased WordPiece vocabulary (the `tokenizers` library) trained on the corpus."""

from __future__ import annotations

import json
from typing import Iterable

from kinject.api import StageConfig, StageContext, is_main_process

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_wordpiece(texts: Iterable[str], size: int, min_frequency: int, alphabet_limit: int, lowercase: bool,
                    model_max_length: int, length: int | None = None):
    """A BERT-style WordPiece tokenizer (``BertTokenizerFast``) trained on ``texts`` (streamed)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=lowercase,
                                                strip_accents=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=size, min_frequency=min_frequency, limit_alphabet=alphabet_limit,
                                        special_tokens=list(SPECIAL_TOKENS), continuing_subword_prefix="##",
                                        show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece(prefix="##")
    return BertTokenizerFast(tokenizer_object=tok, do_lower_case=lowercase, strip_accents=lowercase,
                             unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                             mask_token="[MASK]", model_max_length=model_max_length)


class VocabConfig(StageConfig):
    """An uncased WordPiece vocabulary trained on the ``train.arrow`` texts of ``corpus_stage``."""

    corpus_stage: str
    size: int
    min_frequency: int
    alphabet_limit: int
    lowercase: bool
    model_max_length: int


def vocab_body(cfg: VocabConfig, ctx: StageContext) -> None:
    from datasets import Dataset

    from kinject.knowledge import read_texts

    if not is_main_process():
        return
    path = ctx.inputs[cfg.corpus_stage] / "train.arrow"
    tokenizer = train_wordpiece(read_texts(path), cfg.size, cfg.min_frequency, cfg.alphabet_limit, cfg.lowercase,
                                cfg.model_max_length, length=len(Dataset.from_file(str(path))))
    tokenizer.save_pretrained(ctx.out / "tokenizer")
    vocab = tokenizer.get_vocab()
    stats = {"size": len(vocab), "target_size": cfg.size, "alphabet": sum(len(t) == 1 for t in vocab),
             "continuation_alphabet": sum(len(t) == 3 and t.startswith("##") for t in vocab)}
    (ctx.out / "vocab.json").write_text(json.dumps(stats, indent=2, default=str))
    (ctx.out / "metrics.json").write_text(json.dumps({"vocab": stats}, indent=2, default=str))
