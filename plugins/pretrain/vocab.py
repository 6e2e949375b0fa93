"""Vocabularies: train an uncased WordPiece vocabulary (the `tokenizers` library), carry a model's embeddings
over to a new vocabulary, and compare how vocabularies split biomedical terms and text (Gu et al., Table 1)."""

from __future__ import annotations

from typing import Iterable, Iterator

from .config import SPECIAL_TOKENS

#: Gu et al. Table 1: common biomedical terms (term, category); BERT's vocabulary holds only the first six
TABLE1_TERMS: tuple[tuple[str, str], ...] = (
    ("diabetes", "disease"), ("leukemia", "disease"), ("lithium", "drug"), ("insulin", "drug"), ("DNA", "gene"),
    ("promoter", "gene"), ("hypertension", "disease"), ("nephropathy", "disease"), ("lymphoma", "disease"),
    ("lidocaine", "drug"), ("oropharyngeal", "organ"), ("cardiomyocyte", "cell"), ("chloramphenicol", "drug"),
    ("RecA", "gene"), ("acetyltransferase", "gene"), ("clonidine", "drug"), ("naloxone", "drug"),
)


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


def transfer_embeddings(model, old_tokenizer, new_tokenizer) -> dict[str, int]:
    """Resize ``model`` (a masked-LM) to ``new_tokenizer`` and start each new token's input embedding and
    output bias as the mean over the pieces the old vocabulary splits its text into (special tokens map to
    their old counterparts; a token the old vocabulary cannot spell keeps a random vector)."""
    import torch

    old_embeddings = model.get_input_embeddings().weight.detach().clone()
    old_bias = _output_bias(model)
    old_bias = old_bias.detach().clone() if old_bias is not None else None
    model.resize_token_embeddings(len(new_tokenizer))
    weight = model.get_input_embeddings().weight
    bias = _output_bias(model)
    specials = {new_tokenizer.convert_tokens_to_ids(t): old_tokenizer.convert_tokens_to_ids(t)
                for t in SPECIAL_TOKENS if t in new_tokenizer.get_vocab() and t in old_tokenizer.get_vocab()}
    counts = {"tokens": len(new_tokenizer), "copied": 0, "averaged": 0, "random": 0}
    with torch.no_grad():
        for token, index in new_tokenizer.get_vocab().items():
            if index in specials:
                pieces = [specials[index]]
            else:
                pieces = old_tokenizer(token.removeprefix("##"), add_special_tokens=False)["input_ids"]
                pieces = [p for p in pieces if p != old_tokenizer.unk_token_id]
            if not pieces:
                counts["random"] += 1
                continue
            counts["copied" if len(pieces) == 1 else "averaged"] += 1
            weight[index] = old_embeddings[pieces].mean(0)
            if bias is not None and old_bias is not None:
                bias[index] = old_bias[pieces].mean()
    model.tie_weights()
    return counts


def _output_bias(model):
    out = model.get_output_embeddings()
    return getattr(out, "bias", None) if out is not None else None


# -- comparison --------------------------------------------------------------------------------- #
def pieces(tokenizer, words: list[str]) -> list[list[str]]:
    """The vocabulary's pieces for each word (no special tokens)."""
    encoded = tokenizer(words, add_special_tokens=False)["input_ids"]
    return [tokenizer.convert_ids_to_tokens(ids) for ids in encoded]


def corpus_words(texts: Iterable[str], max_words: int | None = None) -> Iterator[str]:
    """Words of ``texts`` as BERT pre-tokenises them (punctuation split off), those with a letter or digit."""
    from tokenizers.pre_tokenizers import BertPreTokenizer

    split = BertPreTokenizer()
    count = 0
    for text in texts:
        for word, _ in split.pre_tokenize_str(text):
            if any(c.isalnum() for c in word):
                yield word
                count += 1
                if max_words is not None and count >= max_words:
                    return


def corpus_stats(tokenizers: dict[str, object], words: list[str]) -> dict[str, dict[str, float]]:
    """Per tokenizer: mean pieces per word and the share of words kept whole (one piece)."""
    out = {}
    for label, tokenizer in tokenizers.items():
        counts = []
        for lo in range(0, len(words), 5000):
            counts += [len(ids) for ids in tokenizer(words[lo:lo + 5000], add_special_tokens=False)["input_ids"]]
        n = len(counts)
        out[label] = {"words": n, "pieces_per_word": sum(counts) / n if n else float("nan"),
                      "whole_word_share": sum(c == 1 for c in counts) / n if n else float("nan")}
    return out


def term_rows(tokenizers: dict[str, object], terms: list[tuple[str, str]]) -> list[dict]:
    """One row per term: its category and, per tokenizer, the pieces it is split into."""
    split = {label: pieces(tok, [t for t, _ in terms]) for label, tok in tokenizers.items()}
    return [{"term": term, "category": category, "pieces": {label: split[label][i] for label in tokenizers}}
            for i, (term, category) in enumerate(terms)]
