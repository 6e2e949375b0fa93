"""Comparing vocabularies (`kinject vocab compare`): how each splits biomedical terms (Gu et al., Table 1) and
text (pieces per word, words kept whole)."""

from __future__ import annotations

from typing import Iterable, Iterator

#: Gu et al. Table 1: common biomedical terms (term, category); BERT's vocabulary holds only the first six
TABLE1_TERMS: tuple[tuple[str, str], ...] = (
    ("diabetes", "disease"), ("leukemia", "disease"), ("lithium", "drug"), ("insulin", "drug"), ("DNA", "gene"),
    ("promoter", "gene"), ("hypertension", "disease"), ("nephropathy", "disease"), ("lymphoma", "disease"),
    ("lidocaine", "drug"), ("oropharyngeal", "organ"), ("cardiomyocyte", "cell"), ("chloramphenicol", "drug"),
    ("RecA", "gene"), ("acetyltransferase", "gene"), ("clonidine", "drug"), ("naloxone", "drug"),
)


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
