"""`kinject vocab ...`: compare vocabularies (light at import: no torch, no transformers, no kinject.engine)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Vocabularies: how tokenizers split biomedical terms and text (Gu et al., Table 1).")


@app.callback()
def _group() -> None:
    """Vocabularies: how tokenizers split biomedical terms and text."""


def _read_terms(path: Path) -> list[tuple[str, str]]:
    """One term per line, optionally ``term<TAB>category``; DataError naming file:line on bad input."""
    from kinject.api import DataError, iter_lines

    terms = []
    for number, line in iter_lines(path):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        term, _, category = line.partition("\t")
        if not term.strip():
            raise DataError("empty term", path, number)
        terms.append((term.strip(), category.strip()))
    if not terms:
        raise DataError("no terms", path)
    return terms


def _load(name: str):
    """A tokenizer by model name (minilm, tiny, hub id), model directory or tokenizer folder."""
    from kinject.api import default_cache_dir, resolve_model
    from kinject.api import load_tokenizer

    path = Path(name).expanduser()
    return load_tokenizer(str(path) if path.is_dir() else resolve_model(name, default_cache_dir()))


def _corpus_texts(path: Path):
    """Texts of a .txt (a line each) or .jsonl (``text`` field) file, read as the corpus source reads them."""
    from kinject.api import Environment, default_cache_dir, default_data_dir
    from kinject.knowledge import CorpusSource

    source = CorpusSource(paths=[str(path)], min_chars=0, dedupe=False)
    return source.iter_texts(Environment(data_dir=default_data_dir(), cache_dir=default_cache_dir()))


@app.command()
def compare(tokenizers: List[str] = typer.Option(..., "--tokenizer", "-t", help="Model name (minilm, tiny), hub "
                                                 "id, model directory or tokenizer folder; repeat for each"),
            terms: Optional[Path] = typer.Option(None, "--terms", help="Terms file: one term per line, optionally "
                                                 "term<TAB>category (default: Gu et al. Table 1)"),
            corpus: Optional[Path] = typer.Option(None, "--corpus", help="Text (.txt lines or .jsonl 'text') for "
                                                  "pieces per word and the share of words kept whole"),
            max_words: int = typer.Option(200_000, "--max-words", min=1, help="Words read from --corpus"),
            csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write the per-term pieces as CSV"),
            png_out: Optional[Path] = typer.Option(None, "--png", help="Write a bar chart of pieces per term"),
            debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """How many pieces each vocabulary splits each term into, and (with --corpus) pieces per word."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from kinject.api import KinjectError
    from kinject.plugins.pretrain import comparison
    from kinject.plugins.pretrain.report import pieces_chart

    if len(tokenizers) < 1:
        raise KinjectError("--tokenizer: give at least one")
    loaded = {name: _load(name) for name in dict.fromkeys(tokenizers)}
    term_list = _read_terms(terms) if terms else list(comparison.TABLE1_TERMS)
    rows = comparison.term_rows(loaded, term_list)
    console = Console()
    table = Table(title=f"pieces per term ({'Gu et al. Table 1' if terms is None else terms})", title_justify="left")
    table.add_column("term")
    table.add_column("category")
    for name in loaded:
        table.add_column(escape(name), overflow="fold")
    for row in rows:
        table.add_row(row["term"], row["category"], *(f"{len(p)}  {escape(' '.join(p))}"
                                                      for p in row["pieces"].values()))
    table.add_row("[bold]mean[/]", "", *(f"[bold]{sum(len(r['pieces'][n]) for r in rows) / len(rows):.2f}[/]"
                                         for n in loaded))
    table.add_row("[bold]whole[/]", "", *(f"[bold]{sum(len(r['pieces'][n]) == 1 for r in rows)}/{len(rows)}[/]"
                                          for n in loaded))
    console.print(table)
    if corpus is not None:
        words = list(comparison.corpus_words(_corpus_texts(corpus), max_words))
        if not words:
            raise KinjectError(f"--corpus {corpus}: no words")
        stats = comparison.corpus_stats(loaded, words)
        summary = Table(title=f"{corpus} ({len(words)} words)", title_justify="left")
        for column in ("tokenizer", "pieces per word", "words kept whole"):
            summary.add_column(column)
        for name, values in stats.items():
            summary.add_row(escape(name), f"{values['pieces_per_word']:.3f}", f"{values['whole_word_share']:.1%}")
        console.print(summary)
    if csv_out is not None:
        _write_csv(csv_out, rows)
        console.print(f"wrote {csv_out}")
    if png_out is not None:
        pieces_chart(png_out, rows, list(loaded))
        console.print(f"wrote {png_out}")


@app.command("general-corpus")
def general_corpus(out: Path = typer.Option(..., "--out", "-o", help="The .txt file to write (a text a line)"),
                   debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Write the out-of-domain control corpus (the texts of `--set strategy.mlm_corpus=general`): paragraphs of the
    running Python's standard library docstrings and language reference."""
    from kinject.api import atomic_file
    from kinject.plugins.pretrain.control import python_docs_texts, write_texts

    with atomic_file(out) as tmp:
        stats = write_texts(python_docs_texts(), tmp)
    typer.echo(f"wrote {out}: {stats['texts']} texts, {stats['chars']} characters, {stats['words']} words, "
               f"sha256 {stats['sha256']}")


def _write_csv(path: Path, rows: list[dict]) -> None:
    import csv

    from kinject.api import atomic_file

    with atomic_file(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["term", "category", "tokenizer", "pieces", "tokens"])
        for row in rows:
            for name, pieces in row["pieces"].items():
                writer.writerow([row["term"], row["category"], name, len(pieces), " ".join(pieces)])
