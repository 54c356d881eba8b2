#!/usr/bin/env bash
# Issue 28 item 4 on a lent GPU machine: `relaxspec mini validate` on both shipped models with the decoder
# on CUDA (--device cuda), the two models side by side, plus the CUDA tests of the reference decoder.
#
#   OUT=/some/folder benchmarks/gpu_validate.sh            # the run (about 8 minutes on one H100/H200)
#   OUT=/tmp/dry benchmarks/gpu_validate.sh --dry-run      # every stage at toy sizes on the CPU (a minute)
#
# No install: the checkout is put on PYTHONPATH through a folder that maps it into the relaxspec namespace
# (the layout pyproject's package-dir gives an install). Results under $OUT: each model's validation.csv,
# its fitted worlds (worlds.tar), the CUDA tests' and the runs' logs. `relaxspec mini --out FOLDER validate
# --report-only --docs docs/mini_model.md` on a folder holding a validation.csv writes the tables.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:?set OUT to the folder results go to}
PY=${PYTHON:-python3}
LIMIT=${LIMIT:-480}  # seconds the validations may run; rows finished by then are kept (they resume)
mkdir -p "$OUT"
PKG=$(mktemp -d)
mkdir "$PKG/relaxspec"
for f in "$ROOT"/relaxspec/*; do ln -s "$f" "$PKG/relaxspec/"; done
for d in theory core simulate reference mini; do ln -s "$ROOT/$d" "$PKG/relaxspec/$d"; done
export PYTHONPATH=$PKG NUMBA_CACHE_DIR=$PKG/numba PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
# run from the mapped folder: from the checkout, `python -m` would import relaxspec/ without its layers
cd "$PKG"

if [ "${1:-}" = "--dry-run" ]; then
    DEVICE=cpu; N=2; WORKERS=2; CONFIGS=(--configs "AR,SJD L=15")
    FIT=(--kappa-images 2 --fit-rounds 1 --fit-iters 2 --fit-sequences 4 --advise-tv -1)
    TESTS=("$ROOT/tests/reference/test_reference_device.py" -k "not cuda")
else
    DEVICE=cuda; N=40; WORKERS=7; CONFIGS=(); FIT=()
    TESTS=("$ROOT/tests/reference/test_reference_device.py")
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/device.txt"
fi
"$PY" -c "import torch, numba, numpy; print('torch', torch.__version__, 'numba', numba.__version__,
'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$OUT/device.txt"

# the simulator's kernels compile once into the shared cache while the decoders run (the fits need them)
"$PY" -m relaxspec warm-up > "$OUT/warm.log" 2>&1 &
timeout "$LIMIT" "$PY" -m pytest -q -p no:cacheprovider -o addopts="" "${TESTS[@]}" > "$OUT/cuda_tests.log" 2>&1 &
TESTS_PID=$!
for model in mini ambiguous; do
    weights=$ROOT/weights; [ "$model" = ambiguous ] && weights=$ROOT/weights/ambiguous
    timeout "$LIMIT" "$PY" -m relaxspec mini --weights "$weights" --out "$PKG/$model" --no-progress validate \
        --n-sequences "$N" --workers "$WORKERS" --device "$DEVICE" ${CONFIGS[@]+"${CONFIGS[@]}"} ${FIT[@]+"${FIT[@]}"} \
        > "$OUT/validate_$model.log" 2>&1 &
done
wait
for model in mini ambiguous; do
    cp "$PKG/$model/validation/validation.csv" "$OUT/validation_$model.csv" 2>/dev/null
    tar -C "$PKG/$model/validation" -cf "$OUT/worlds_$model.tar" worlds 2>/dev/null
done
for f in "$OUT"/validate_*.log "$OUT/cuda_tests.log"; do tail -n 3 "$f"; done
wait "$TESTS_PID" 2>/dev/null
ls -la "$OUT"
