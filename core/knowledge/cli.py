"""`kinject kg`: knowledge-graph statistics, METIS partitioning and KG training-data builds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Knowledge graphs: stats, partition, build.")

SOURCE_HELP = "A source name (triples, umls, hpo) or a path to a triples file / folder"
SET_HELP = "Source option KEY=VALUE (e.g. path=..., min_relation_count=10000, on_bad_rows=skip)"


def _open(source: str, sets: Optional[List[str]], cache_dir: Optional[Path] = None):
    """The checked triples source and its environment."""
    from kinject.knowledge.sources.resolve import open_source
    from kinject.api import Environment, default_cache_dir, default_data_dir

    src = open_source(source, sets)
    if getattr(src, "kind", "") != "triples":
        from kinject.api import SpecError

        raise SpecError(f"SOURCE {source!r} is a {src.kind} source, not a knowledge graph")
    env = Environment(data_dir=default_data_dir(), cache_dir=cache_dir or default_cache_dir())
    src.check(env)
    return src, env


@app.command()
def stats(source: str = typer.Argument(..., help=SOURCE_HELP),
          sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
          top: int = typer.Option(20, help="Show the N most frequent relations"),
          as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables")):
    """Entities, relations, triples, per-relation counts and the degree distribution of a KG."""
    from rich.console import Console
    from rich.table import Table

    from kinject.knowledge.kg.partition import stream_stats

    src, env = _open(source, sets)
    result = stream_stats(src.iter_triples(env), top=top)  # streamed: memory flat in the number of triples
    bad = getattr(src, "bad_rows", None)  # a third party's source may not count bad rows
    skipped = getattr(bad, "count", 0) or 0
    result["bad_rows_skipped"] = skipped
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    console = Console()
    console.print(f"[bold]{source}[/]: {result['entities']} entities, {result['relations']} relations, "
                  f"{result['triples']} triples" + (f", {skipped} bad rows skipped (first: {bad.first})"
                                                    if skipped else ""))
    table = Table(title="relations", title_justify="left")
    table.add_column("relation")
    table.add_column("triples", justify="right")
    for name, count in result["relation_counts"].items():
        table.add_row(name, str(count))
    console.print(table)
    deg = result["degree"]
    console.print("degree: " + ", ".join(f"{k} {v:g}" for k, v in deg.items()))
    console.print("degree histogram: " + ", ".join(f"{k}: {v}" for k, v in result["degree_histogram"].items()))


@app.command()
def partition(source: str = typer.Argument(..., help=SOURCE_HELP),
              k: int = typer.Option(..., "-k", help="Number of parts"),
              output: Path = typer.Option(..., "--output", "-o", help="Folder for part-<i>.tsv and report.json"),
              sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
              shuffle: float = typer.Option(0.0, "--shuffle", help="Reassign this fraction of entities at random"),
              seed: int = typer.Option(0, help="Seed for METIS, --shuffle and the random baseline")):
    """METIS partition of the entity graph into K balanced parts; per-part triples and a report."""
    from kinject.knowledge.kg.partition import EntityGraph, metis_parts, partition_report, shuffle_parts, write_partition
    from kinject.api import DataError

    if output.exists() and any(output.iterdir()):
        raise DataError("output folder exists and is not empty", output)
    src, env = _open(source, sets)
    graph = EntityGraph.from_triples(src.iter_triples(env))
    parts = metis_parts(graph, k, seed)
    if shuffle:
        parts = shuffle_parts(parts, shuffle, seed)
    report = partition_report(graph, parts, k, seed)
    report["shuffle"] = shuffle
    write_partition(graph, parts, report, output)
    typer.echo(f"{k} parts -> {output}: edge cut {report['edge_cut']} of {report['edges']} edges "
               f"({report['cut_vs_random']:.3f}x random), triples inside parts {report['triples_inside']} of "
               f"{report['triples']}, part sizes {min(report['part_sizes'])}-{max(report['part_sizes'])}")


@app.command()
def build(source: str = typer.Argument(..., help=SOURCE_HELP),
          model: str = typer.Option("minilm", "--model", "-m", help="Tokenizer of this model"),
          sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
          tasks: str = typer.Option("entity,relation,triplet,tail", help="Comma-separated KG training sets"),
          max_length: int = typer.Option(128, help="Tokens per sequence"),
          num_proc: int = typer.Option(1, help="Tokenizer processes"),
          limit: Optional[int] = typer.Option(None, min=1, help="Use at most N triples"),
          cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Cache folder")):
    """Build (or find in the cache) the tokenized KG training sets of a source."""
    from kinject.knowledge.kg.data import KGDataConfig, build_kg_data
    from kinject.api import resolve_model
    from kinject.api import load_tokenizer
    from pydantic import ValidationError
    from kinject.api import SpecError

    src, env = _open(source, sets, cache_dir)
    try:
        config = KGDataConfig(tasks=[t.strip() for t in tasks.split(",") if t.strip()], max_length=max_length,
                              num_proc=num_proc, max_triples=limit)
    except ValidationError as exc:
        from kinject.api import format_validation_error

        raise SpecError(format_validation_error(exc)) from None
    data = build_kg_data(src, env, load_tokenizer(resolve_model(model, env.cache_dir)), config)
    typer.echo(f"{'cache hit' if data.cached else 'built'}: {data.path}")
    typer.echo(json.dumps(data.stats))
