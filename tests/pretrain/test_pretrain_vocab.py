"""In-domain WordPiece vocabularies: training, save/load round trip, embedding transfer, `kinject vocab compare`."""

from __future__ import annotations

import csv

import pytest

from helpers import run_kinject as kinject
from kinject.knowledge.masked_lm import transfer_embeddings
from kinject.plugins.pretrain.comparison import TABLE1_TERMS, corpus_stats, corpus_words, term_rows
from kinject.plugins.pretrain.vocab import train_wordpiece

TEXTS = ["Lymphoma patients received lidocaine and naloxone; acetyltransferase activity increased.",
         "Naloxone reversed the opioid effect in lymphoma and leukemia patients.",
         "Acetyltransferase and kinase genes were expressed in cardiomyocyte cultures."] * 40


@pytest.fixture(scope="module")
def trained():
    return train_wordpiece(iter(TEXTS), size=200, min_frequency=2, alphabet_limit=60, lowercase=True,
                           model_max_length=128)


def test_table1_terms_are_the_papers_seventeen():
    assert len(TABLE1_TERMS) == 17 and TABLE1_TERMS[4] == ("DNA", "gene") and TABLE1_TERMS[-1] == ("naloxone", "drug")
    assert {c for _, c in TABLE1_TERMS} == {"disease", "drug", "gene", "organ", "cell"}


def test_trained_vocabulary_round_trips_through_save_and_load(trained, tmp_path):
    from transformers import AutoTokenizer

    assert len(trained) <= 200 and trained.mask_token == "[MASK]"
    assert trained.tokenize("Lymphoma NALOXONE") == ["lymphoma", "naloxone"]  # uncased, in-domain words whole
    trained.save_pretrained(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert loaded.get_vocab() == trained.get_vocab() and loaded.is_fast
    for text in TEXTS[:3] + ["unseen words: zebrafish Ω"]:
        assert loaded(text)["input_ids"] == trained(text)["input_ids"]
    ids = loaded("lymphoma")["input_ids"]
    assert ids[0] == loaded.cls_token_id and ids[-1] == loaded.sep_token_id


def test_term_rows_and_corpus_stats(trained, tiny_model):
    from kinject.api import load_tokenizer

    tokenizers = {"in-domain": trained, "tiny": load_tokenizer(tiny_model)}
    rows = term_rows(tokenizers, [("lymphoma", "disease"), ("acetyltransferase", "gene")])
    assert rows[0]["pieces"]["in-domain"] == ["lymphoma"]
    assert "".join(p.removeprefix("##") for p in rows[1]["pieces"]["tiny"]) == "acetyltransferase"
    words = list(corpus_words(TEXTS[:3], max_words=1000))
    assert words[:3] == ["Lymphoma", "patients", "received"] and ";" not in words  # punctuation is no word
    stats = corpus_stats(tokenizers, words)
    assert stats["in-domain"]["whole_word_share"] == 1.0 and stats["in-domain"]["pieces_per_word"] == 1.0
    assert stats["tiny"]["pieces_per_word"] > 3 and stats["tiny"]["words"] == len(words)


def test_embedding_transfer_averages_the_old_pieces(trained, tiny_model):
    import torch
    from transformers import AutoModelForMaskedLM

    from kinject.api import load_tokenizer

    old = load_tokenizer(tiny_model)
    model = AutoModelForMaskedLM.from_pretrained(tiny_model)
    before = model.get_input_embeddings().weight.detach().clone()
    counts = transfer_embeddings(model, old, trained)
    after = model.get_input_embeddings().weight
    assert after.shape[0] == len(trained) and counts["copied"] + counts["averaged"] + counts["random"] == len(trained)
    new = trained.convert_tokens_to_ids("lymphoma")
    pieces = old("lymphoma", add_special_tokens=False)["input_ids"]
    assert torch.allclose(after[new], before[pieces].mean(0))
    assert torch.equal(after[trained.mask_token_id], before[old.mask_token_id])  # specials map to specials
    assert model.get_output_embeddings().weight.data_ptr() == after.data_ptr()  # still tied


def test_vocab_compare_cli_writes_csv_and_png(tmp_path, trained, tiny_model, capsys):
    trained.save_pretrained(tmp_path / "tok")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS[:3]) + "\n")
    code = kinject("vocab", "compare", "--tokenizer", "minilm", "--tokenizer", str(tmp_path / "tok"),
                   "--corpus", str(corpus), "--csv", str(tmp_path / "t.csv"), "--png", str(tmp_path / "t.png"))
    assert code == 0
    out = capsys.readouterr().out
    assert "acetyltransferase" in out and "pieces per word" in out
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert len(rows) == 2 * 17
    minilm = {r["term"]: r for r in rows if r["tokenizer"] == "minilm"}
    assert minilm["lymphoma"]["tokens"] == "l ##ym ##ph ##oma"  # Gu et al.: BERT splits lymphoma in four
    assert int(minilm["acetyltransferase"]["pieces"]) == 7 and int(minilm["diabetes"]["pieces"]) == 1
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_vocab_compare_bad_terms_file(tmp_path, capsys):
    terms = tmp_path / "terms.txt"
    terms.write_bytes(b"lymphoma\n\xff\xfe bad\n")
    assert kinject("vocab", "compare", "-t", "minilm", "--terms", str(terms)) == 2
    assert "terms.txt:2: invalid UTF-8" in capsys.readouterr().err
