"""Digests of the test predictions (and weights) of every built-in strategy on the tiny model, for refactors that
must change nothing (byte-identical before and after).

    python -m benchmarks.prediction_digests before.json          # on the old commit
    python -m benchmarks.prediction_digests after.json --against before.json [--set FIELD=VALUE ...]

Each strategy runs `--quick` on hpo-isa with the tiny random BERT in a fresh cache, offline; `compare` digests
`kinject compare --json` of all seven runs (finetune the baseline) on dev and on test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

STRATEGIES = ("finetune", "kimera", "mop", "stilt", "doktra", "pretrain", "context")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def digests(workdir: Path, data_dir: str, settings: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "KINJECT_CACHE_DIR": str(workdir / "cache"),
           "KINJECT_DATA_DIR": data_dir, "KINJECT_CHOOSE": "0"}
    found = {}
    for name in STRATEGIES:
        out = workdir / name
        subprocess.run([sys.executable, "-m", "kinject", "run", name, "--task", "hpo-isa", "--model", "tiny",
                        "--quick", *(a for s in settings for a in ("--set", s)), "-o", str(out)],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        files = sorted((out / "predictions").glob("*.jsonl")) + sorted(out.glob("model/*.safetensors"))
        found[name] = {str(f.relative_to(out)): _digest(f) for f in files}
    # the evidence guard: `kinject compare --json` of every strategy's run against finetune's, bit for bit
    runs = [str(workdir / name) for name in STRATEGIES]
    for split in ("dev", "test"):
        shown = subprocess.run([sys.executable, "-m", "kinject", "compare", *runs, "--split", split, "--json"],
                               env=env, check=True, capture_output=True, text=True).stdout
        shown = shown.replace(str(workdir), "<work>")
        found.setdefault("compare", {})[f"{split}.json"] = hashlib.sha256(shown.encode()).hexdigest()[:16]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--against", type=Path, help="an earlier output to compare with")
    parser.add_argument("--data-dir", default=os.environ.get("KINJECT_DATA_DIR", "../shared/data"))
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="FIELD=VALUE",
                        help="a setting for every run (e.g. to keep a default an old commit had: "
                             "defaults.head_rate=true)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        found = digests(Path(work), args.data_dir, tuple(args.settings))
    args.output.write_text(json.dumps(found, indent=1) + "\n")
    if args.against is None:
        print(json.dumps(found, indent=1))
        return 0
    before = json.loads(args.against.read_text())
    changed = [f"{name}/{file}" for name in (*STRATEGIES, "compare") for file in sorted(set(before[name]) | set(found[name]))
               if before[name].get(file) != found[name].get(file)]
    print("identical" if not changed else "changed: " + ", ".join(changed))
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
