"""``kinject push``: the hub plugin's command (entry point ``kinject.commands``: ``push``). The work is in
:mod:`kinject.plugins.hub.push`; user errors are KinjectErrors (one line, exit code 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def push(run: Path = typer.Argument(..., help="A run folder (the one holding run.json)"),
         repo_id: str = typer.Option(..., "--repo-id", help="The Hub repository, e.g. you/kimera-capr"),
         private: bool = typer.Option(False, "--private", help="Create the repository private (an existing one "
                                      "keeps its visibility)"),
         dry_run: bool = typer.Option(False, "--dry-run", help="Write the card to RUN/README.md and list the files "
                                      "that would be sent; upload nothing (no network, no token)"),
         revision: Optional[str] = typer.Option(None, "--revision", help="Branch to commit to (created if missing; "
                                                "default: the main branch)"),
         commit_message: Optional[str] = typer.Option(None, "--commit-message", help="Commit message (default: "
                                                      "strategy, task and run folder)"),
         license: Optional[str] = typer.Option(None, "--license", help="The card's licence (a Hub licence id, e.g. "
                                               "apache-2.0); default: the base model's, required when unknown"),
         debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Publish a run on the Hugging Face Hub: what its strategy shares (the model; MoP: its adapters and fusion too)
    and a model card written from run.json and metrics.json."""
    from kinject.plugins.hub.card import size_text
    from kinject.plugins.hub.push import publish

    found = publish(run, repo_id, private=private, dry_run=dry_run, revision=revision,
                    commit_message=commit_message, license=license)
    for warning in found.warnings:
        typer.echo(f"warning: {warning}", err=True)
    listing = found.listing()
    width = max(len(path) for path, _ in listing)
    total = sum(size for _, size in listing)
    if dry_run:
        typer.echo(f"dry run, nothing uploaded: {repo_id} would get {len(listing)} files ({size_text(total)}); "
                   f"the card is in {found.card_path}")
    else:
        typer.echo(f"pushed {len(listing)} files ({size_text(total)}) to {repo_id}: {found.url}")
    for path, size in listing:
        typer.echo(f"  {path:<{width}}  {size_text(size):>9}")
    typer.echo(f"checked: {found.verified}")
