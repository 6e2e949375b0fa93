"""Print the modules in each stage's code fingerprint (its cache key's code part) for the built-in strategies on the
tiny model: `.venv/bin/python -m benchmarks.stage_closures [-v]` (docs/architecture.md)."""
import os, sys, tempfile
from pathlib import Path
os.environ["HF_HUB_OFFLINE"] = "1"
from benchmarks.common import write_kg, write_textcls
from kinject.api import build_spec, prepare
from kinject.keys import plan
tmp = Path(tempfile.mkdtemp())
data = write_textcls(tmp / "d"); kg = write_kg(tmp / "kg.tsv")
corpus = tmp / "c.txt"; corpus.write_text("gene expression in tumor cells.\n" * 50)
specs = {
 "finetune": {},
 "kimera": {"sources": [{"name": "triples", "path": str(kg)}]},
 "mop": {"sources": [{"name": "triples", "path": str(kg)}], "strategy": {"name": "mop", "partitions": 2}},
 "doktra": {"strategy": {"name": "doktra", "teacher": "tiny"}, "training": {"epochs": 2}},
 "stilt": {"strategy": {"name": "stilt", "intermediate": [{"name": "textcls", "path": str(data)}]}},
 "pretrain": {"sources": [{"name": "corpus", "paths": [str(corpus)]}], "model": {"name": "tiny", "max_length": 64}},
}
out = {}
for name, extra in specs.items():
    spec = {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(data)},
            "strategy": {"name": name}, "cache_dir": str(tmp / "cache"), **extra}
    run = prepare(build_spec(spec))
    for p in plan(run):
        out[f"{name}/{p.stage.name}"] = sorted(p.code_modules)
verbose = "-v" in sys.argv
for k, v in out.items():
    print(f"{len(v):3d} {k}" + (": " + ", ".join(m.replace("kinject.", "") for m in v) if verbose else ""))
