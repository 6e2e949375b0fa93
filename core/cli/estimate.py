"""Time estimates for ``--dry-run``, before a stage ever ran here and after (:class:`Estimator`).

A stage's estimate is its stated arithmetic (``StageConfig.cost``, FLOPs: :mod:`.cost`) at this machine's
measured speed (:func:`machine_speed`, measured once and kept in the cache) plus a fixed overhead, scaled by
how far such estimates were off on the stages this machine has run (every computed stage records its FLOPs in its
stage.json). A stage that states no arithmetic costs the overhead; one this cache ran before without a record of its
FLOPs, the median of those runs.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path


log = logging.getLogger("kinject")

OVERHEAD_S = 5.0  # a stage's fixed cost (loading the model and data, writing) before any was measured here
SPEED_FILE = "machine-speed.json"
_PAST = 50  # at most this many finished stages of one name are read


def machine_speed(cache_dir: Path, bf16: bool) -> float:
    """This machine's training speed in FLOP/s: forward + backward of two BERT-sized transformer layers (hidden 384,
    8 x 128 tokens; under bfloat16 autocast with ``bf16``), counted as :mod:`kinject.training.cost` counts a
    stage (6 x weights per token + attention), the fastest of 3 passes. Measured once per torch version, thread count
    and precision, kept in ``cache_dir``. A raw matmul overstates it ~7x here (AMX bf16); a busy machine's slower
    stages show in the correction from past runs (:class:`Estimator`)."""
    import torch

    key = f"torch {torch.__version__}, {torch.get_num_threads()} threads, {'bf16' if bf16 else 'fp32'}"
    path = Path(cache_dir) / SPEED_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known.get(key), dict):
        return float(known[key]["flops_per_s"])
    hidden, inner, length, batch, layers = 384, 1536, 128, 8, 2
    generator = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():  # the run's own random state is left as it was
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(hidden, 12, inner, dropout=0.0, batch_first=True)
                                      for _ in range(layers)])
    x = torch.randn(batch, length, hidden, generator=generator)
    times = []
    for _ in range(4):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
        out.float().sum().backward()
        times.append(time.perf_counter() - start)
    flops = 3 * batch * length * layers * (2 * (4 * hidden ** 2 + 2 * hidden * inner) + 4 * length * hidden)
    speed = flops / min(times[1:])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    known[key] = {"flops_per_s": speed, "load_average": load, "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    from kinject.api import atomic_write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(known, indent=2))
    except OSError:  # a read-only cache: measured again next time
        pass
    log.info("this machine's training speed: %.1f GFLOP/s (%s, load average %s; kept in %s: delete it to measure "
             "again)", speed / 1e9, key, "?" if load is None else f"{load:.1f}", path)
    return speed


def _past(cache_dir: Path, name: str) -> list[dict]:
    found = []
    for record in sorted(Path(cache_dir, "stages", name).glob("*/stage.json"))[:_PAST]:
        try:
            info = json.loads(record.read_text())
            found.append({"seconds": float(info["seconds"]), "flops": info.get("flops", "unrecorded")})
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


@dataclass
class Estimate:
    seconds: float
    how: str  # how it was estimated, for the dry run's stage line


class Estimator:
    """Estimates of one cache's stages on this machine (see the module docstring)."""

    def __init__(self, cache_dir: Path, bf16: bool):
        self.cache_dir, self.bf16, self._speed = Path(cache_dir), bf16, None
        self.ratios: dict[str, list[float]] = {}  # stage name -> actual / estimated seconds of its past runs
        self.seconds: dict[str, list[float]] = {}  # stage name -> seconds of past runs that recorded no FLOPs
        self.worked: list[float] = []  # the ratios of past runs that stated FLOPs
        for folder in sorted(Path(cache_dir, "stages").glob("*")) if Path(cache_dir, "stages").is_dir() else []:
            for past in _past(cache_dir, folder.name):
                if past["flops"] == "unrecorded":  # computed before stages recorded their FLOPs
                    self.seconds.setdefault(folder.name, []).append(past["seconds"])
                else:
                    self.ratios.setdefault(folder.name, []).append(past["seconds"] / self.raw(past["flops"]))
                    if past["flops"]:  # stages that state their arithmetic correct each other (not the overhead)
                        self.worked.append(self.ratios[folder.name][-1])

    @property
    def speed(self) -> float:
        if self._speed is None:
            self._speed = machine_speed(self.cache_dir, self.bf16)
        return self._speed

    def raw(self, flops: float | None) -> float:
        """Seconds before any correction: the overhead plus ``flops`` at the measured speed."""
        return OVERHEAD_S + (flops / self.speed if flops else 0.0)

    def __call__(self, name: str, flops: float | None) -> Estimate:
        """Stage ``name``'s time, from the FLOPs it states (None: none)."""
        raw = self.raw(flops)
        work = f"{flops / 1e12:.3g} TFLOP at {self.speed / 1e9:.0f} GFLOP/s" if flops else "no stated work"
        own = self.ratios.get(name)
        if own:
            return Estimate(raw * statistics.median(own), f"{work}, x{statistics.median(own):.2f} as its "
                                                          f"{len(own)} earlier run(s) here")
        if self.seconds.get(name):
            return Estimate(statistics.median(self.seconds[name]), "the median of this machine's "
                            f"{len(self.seconds[name])} earlier run(s) of it")
        if flops and self.worked:
            return Estimate(raw * statistics.median(self.worked), f"{work}, x{statistics.median(self.worked):.2f} as "
                                                                  "this machine's earlier stages")
        return Estimate(raw, f"{work}, + {OVERHEAD_S:.0f} s overhead")

    def accuracy(self) -> str:
        """How far the uncorrected estimates were off on the stages this cache holds (actual / estimate)."""
        every = sorted(self.worked)
        if not every:
            return "no stage has run with this cache yet: the estimate is uncorrected (model size x tokens / speed)"
        return (f"on the {len(every)} stage run(s) this cache holds, actual / uncorrected estimate was "
                f"{every[0]:.2f}..{every[-1]:.2f} (median {statistics.median(every):.2f}); estimates are scaled by it")

