"""Test helpers for DoKTra: a second tiny BERT with another tokenizer (word level) and another width, so teacher
and student differ in vocabulary, sequence length and hidden size."""

from __future__ import annotations

from pathlib import Path

WORDS = ("gene expression increased in tumor cells the drug dose reduced symptoms protein level rose after "
         "treatment patients with disease had risk weather was cold today we went to market a cat sat on mat "
         "trains run late sunday").split()


def word_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(specials + WORDS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=128)


def build_word_teacher(directory: Path, hidden: int = 48) -> Path:
    """A seeded 2-layer BERT encoder (hidden ``hidden``) with a word-level tokenizer, saved to ``directory``."""
    import torch
    from transformers import BertConfig, BertModel

    if (directory / "config.json").exists():
        return directory
    tokenizer = word_tokenizer()
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=hidden * 2, max_position_embeddings=128)
    torch.manual_seed(1)
    BertModel(config).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory
