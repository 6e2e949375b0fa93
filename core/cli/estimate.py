"""Time estimates for ``--dry-run``, before a stage ever ran here and after (:class:`Estimator`).

A stage's estimate is a model of what it does: a fixed part (:data:`STAGE_S` for setting up and writing, plus what
its cost's helpers note: featurizing the data it reads, loading the model; :func:`kinject.training.fixed_costs`) and
its stated arithmetic (``StageConfig.cost``, FLOPs: :mod:`kinject.training.cost`) at this machine's measured speed
for the run's model (:func:`machine_speed`, measured once per model shape and kept in the cache). Where this cache
holds earlier runs of the same stage of a similar size (FLOPs within :data:`SIMILAR` x), the model is scaled by how far
it was off on them; runs of other stages or sizes never scale it. Every computed stage records its FLOPs and fixed
seconds in its stage.json.

The files it reads back (``machine-speed.json``, every ``stage.json``) are read like user input: bounded, only
regular files, values checked; a bad one is one warning naming the file, then ignored (the speed measured again, the
run left out). Nothing is written where the cache is read-only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger("kinject")

STAGE_S = 0.5  # a stage's fixed cost besides data and model (set-up, writing, releasing memory; docs/benchmarks.md)
#: a choice's fold run besides its stages: preparing the fold's run and its splits (a grid cell's 10 tiny fold runs took
#: 3.2 s each on a 2-core AVX2 EPYC, about 1.8 s on the AMX class; docs/benchmarks.md)
FOLD_RUN_S = 1.5
OVERHEAD_S = 5.0  # the fixed cost of a past run that recorded none (computed before stages recorded it)
SIMILAR = 3.0  # past runs within this factor of FLOPs correct an estimate
SPEED_FILE = "machine-speed.json"
SPEED_BYTES = 1 << 20  # machine-speed.json holds a few entries; more is not kinject's
STAGE_BYTES = 64 << 20  # a stage.json lists its files: large stages list many
_PAST = 50  # at most this many finished stages of one name are read
_WARNED: set[str] = set()


def _warn(path: Path, why: str, then: str) -> None:
    """One warning per file and process: what is wrong with a file kinject wrote itself, and what happens instead."""
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        log.warning("%s: %s; %s", path, why, then)


def read_record(path: Path, limit: int, then: str) -> dict | None:
    """The JSON object in ``path`` (a file kinject wrote; :func:`kinject.records.read_record`), or None with one
    warning saying why and ``then`` (what is done instead). A missing file is None without a warning."""
    from kinject.errors import DataError, DataMissingError
    from kinject.records import read_record as read_checked

    try:
        return read_checked(path, dict, limit)
    except DataMissingError:
        return None
    except DataError as exc:
        _warn(path, exc.reason, then)
        return None


def _positive(value: Any) -> float | None:
    """``value`` as a finite number > 0, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _shape_key(shape) -> str:
    return f"hidden {shape.hidden}, inner {shape.intermediate}" if shape is not None else "hidden 384, inner 1536"


def machine_speed(cache_dir: Path, bf16: bool, shape=None, scoring: bool = False) -> float:
    """This machine's speed in FLOP/s for layers of the run's model (``shape``: a
    :class:`kinject.training.cost.Shape`; None: minilm's), counted as :mod:`kinject.training.cost` counts a stage:
    training (forward, backward and an AdamW step of two such transformer layers on 16 x 128 tokens) or, with
    ``scoring``, inference (a forward pass on 64 x 128 tokens under ``torch.inference_mode``), under bfloat16 autocast
    with ``bf16``; the fastest of 2 passes after a warm-up. A small model's layers are far slower per FLOP than a
    large one's (per-operation costs dominate), and train slower per FLOP than they score. Measured once per torch
    version, thread count, precision, layer size and kind; kept in ``cache_dir``."""
    import torch

    key = f"torch {torch.__version__}, {torch.get_num_threads()} threads, {'bf16' if bf16 else 'fp32'}, " \
          f"{_shape_key(shape)}{', scoring' if scoring else ''}"
    path = Path(cache_dir) / SPEED_FILE
    then = "measuring this machine's speed again"
    known = read_record(path, SPEED_BYTES, then) or {}
    entry = known.get(key)
    if entry is not None:
        speed = _positive(entry.get("flops_per_s")) if isinstance(entry, dict) else None
        if speed is not None:
            return speed
        _warn(path, f"its entry {key!r} is no positive speed", then)
    speed = _measure(shape, bf16, scoring)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    known[key] = {"flops_per_s": speed, "load_average": load, "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    from kinject.api import atomic_write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(known, indent=2))
    except OSError:  # a read-only cache: measured again next time
        pass
    log.info("this machine's %s speed: %.2g GFLOP/s (%s, load average %s; kept in %s: delete it to measure again)",
             "scoring" if scoring else "training", speed / 1e9, key, "?" if load is None else f"{load:.1f}", path)
    return speed


def _measure(shape, bf16: bool, scoring: bool) -> float:
    import contextlib

    import torch

    hidden = shape.hidden if shape is not None else 384
    inner = shape.intermediate if shape is not None else 4 * hidden
    heads = next(h for h in (12, 8, 6, 4, 2, 1) if hidden % h == 0)
    length, batch, layers = 128, 64 if scoring else 16, 2
    generator = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():  # the run's own random state is left as it was
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(hidden, heads, inner, dropout=0.0,
                                                                       batch_first=True) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    x = torch.randn(batch, length, hidden, generator=generator)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        with torch.inference_mode() if scoring else contextlib.nullcontext(), \
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
        if not scoring:
            out.float().sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    per_token = layers * (2 * (4 * hidden ** 2 + 2 * hidden * inner) + 4 * length * hidden)
    return (1 if scoring else 3) * batch * length * per_token / min(times[1:])


@dataclass
class Past:
    """A finished run of a stage in this cache, as its stage.json records it."""

    seconds: float
    flops: float | None  # None: stated none
    scoring: float  # the FLOPs of them that score rather than train
    fixed_s: float  # the fixed seconds its cost noted (OVERHEAD_S where it recorded none)


def past_runs(cache_dir: Path, name: str) -> list[Past]:
    """The finished runs of stage ``name`` this cache holds (at most :data:`_PAST`; a damaged record is left out
    with one warning)."""
    found = []
    then = "left out of the time estimate"
    for record in sorted(Path(cache_dir, "stages", name).glob("*/stage.json"))[:_PAST]:
        info = read_record(record, STAGE_BYTES, then)
        if info is None:
            continue
        seconds, flops = _positive(info.get("seconds")), info.get("flops")
        fixed, scoring = info.get("fixed_s", OVERHEAD_S), info.get("scoring_flops") or 0.0
        if seconds is None or not all(v is None or v == 0 or _positive(v) for v in (flops, fixed, scoring)) \
                or fixed is None:
            _warn(record, "its seconds, flops, scoring_flops or fixed_s are no positive numbers", then)
            continue
        found.append(Past(seconds, _positive(flops), float(scoring), float(fixed)))
    return found


@dataclass
class Estimate:
    seconds: float
    how: str  # how it was estimated, for the dry run's stage line


class Estimator:
    """Estimates of one cache's stages on this machine (see the module docstring)."""

    def __init__(self, cache_dir: Path, bf16: bool):
        self.cache_dir, self.bf16 = Path(cache_dir), bf16
        self._speeds: dict[str, float] = {}
        self._past: dict[str, list[Past]] = {}
        self.corrected: list[float] = []  # the factors applied, for accuracy()

    def speed(self, shape=None, scoring: bool = False) -> float:
        key = _shape_key(shape) + (", scoring" if scoring else "")
        if key not in self._speeds:
            self._speeds[key] = machine_speed(self.cache_dir, self.bf16, shape, scoring)
        return self._speeds[key]

    def model(self, flops: float | None, scoring: float, fixed_s: float, shape=None) -> float:
        """Seconds by the model alone: the fixed part, and ``flops`` at the measured speeds (``scoring`` of them at
        the scoring speed, the rest at the training speed)."""
        if not flops:
            return STAGE_S + fixed_s
        scoring = min(scoring, flops)
        return STAGE_S + fixed_s + (flops - scoring) / self.speed(shape) + \
            (scoring / self.speed(shape, scoring=True) if scoring else 0.0)

    def similar(self, name: str, flops: float | None) -> list[Past]:
        """Earlier runs of stage ``name`` here of a similar size (FLOPs within :data:`SIMILAR` x; or both none)."""
        if name not in self._past:
            self._past[name] = past_runs(self.cache_dir, name)
        return [p for p in self._past[name] if (p.flops is None) == (not flops)
                and (not flops or 1 / SIMILAR <= p.flops / flops <= SIMILAR)]

    def __call__(self, name: str, cost: dict, shape=None) -> Estimate:
        """Stage ``name``'s time from its cost (:func:`kinject.stage_runner.stage_cost`: ``flops``, ``scoring_flops``,
        ``fixed_s``) and the extra seconds of reading its knowledge sources (``read_s``; left out where earlier runs
        scale the estimate: they read them too)."""
        flops, fixed = cost.get("flops"), float(cost.get("fixed_s") or 0.0)
        scoring = float(cost.get("scoring_flops") or 0.0)
        seconds = self.model(flops, scoring, fixed, shape)
        work = "no stated work"
        if flops:
            mostly = "scoring" if scoring >= flops / 2 else "training"
            work = f"{flops / 1e12:.3g} TFLOP at {self.speed(shape, mostly == 'scoring') / 1e9:.2g} GFLOP/s ({mostly})"
        how = f"{work} + {STAGE_S + fixed:.0f} s fixed"
        past = self.similar(name, flops)
        if not past and cost.get("read_s"):
            seconds += cost["read_s"]
            how += f" + {cost['read_s']:.0f} s reading knowledge"
        if past:
            factor = statistics.median(p.seconds / self.model(p.flops, p.scoring, p.fixed_s, shape) for p in past)
            self.corrected.append(factor)
            return Estimate(seconds * factor, f"{how}, x{factor:.2f} as {len(past)} earlier run(s) of it here")
        return Estimate(seconds, how)

    def accuracy(self) -> str:
        """What the estimate rests on: corrected by similar earlier runs here, or the model alone."""
        if not self.corrected:
            return ("the model alone (fixed costs + FLOPs at the measured speeds): no run of these stages of a "
                    "similar size is in this cache yet")
        every = sorted(self.corrected)
        return (f"{len(every)} stage(s) scaled by their earlier runs of a similar size here (actual / model "
                f"{every[0]:.2f}..{every[-1]:.2f}, median {statistics.median(every):.2f})")


# -- a prepared run's stages ------------------------------------------------------------------------------- #
def stage_sources(value) -> Iterator[Any]:
    """The knowledge sources (``SourceRef``) a stage config holds, at any depth."""
    from kinject.api import SourceRef

    if isinstance(value, SourceRef):
        yield value
    elif hasattr(type(value), "model_fields"):
        for name in type(value).model_fields:
            yield from stage_sources(getattr(value, name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from stage_sources(item)


def read_seconds(config, env) -> float:
    """About how long reading the knowledge sources of a stage config takes here (a source that cannot say: 0)."""
    total = 0.0
    for ref in {ref.model_dump_json(): ref for ref in stage_sources(config)}.values():
        source = ref.raw()
        if hasattr(source, "read_seconds"):
            try:
                total += source.read_seconds(ref.environment_for(env))
            except Exception:  # an estimate is never worth a failed dry run
                continue
    return total


def stage_estimates(run, estimator) -> list[tuple[Any, Any]]:
    """(planned stage, its estimate or None where it is cached) for every stage of a prepared run."""
    from kinject.api import plan
    from kinject.stage_runner import stage_cost
    from kinject.training import model_shape

    try:
        shape = model_shape(run)
    except Exception:  # an estimate is never worth a failed dry run: minilm's layers then
        shape = None
    out = []
    for planned in plan(run):
        guess = None
        if not planned.cached:
            cost = {**stage_cost(planned.stage.config, run), "read_s": read_seconds(planned.stage.config, run.env)}
            guess = estimator(planned.stage.name, cost, shape)
        out.append((planned, guess))
    return out


def choice_estimate(run_ctx, estimator) -> tuple[int, float] | None:
    """(fold runs, seconds of each) of the choice a run makes first (None: it makes none, or its folds are cached)."""
    from kinject.api import build_spec, prepare
    from kinject.preparation import dry_running

    planned = run_ctx.chosen or {}
    if not planned.get("planned"):
        return None
    with dry_running():
        fold = prepare(build_spec(planned["fold_spec"]))
    each = FOLD_RUN_S + sum(guess.seconds for _, guess in stage_estimates(fold, estimator) if guess is not None)
    return planned["fold_runs"], each
