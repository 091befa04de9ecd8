#!/usr/bin/env bash
# The GPU checklist of benchmarks/GPU.md in one call of the device tool:
# the layers against Keras' (fused attention included), then model.fit of both
# apps on JAX from token folders in float32 and mixed bfloat16, the run folders
# packed into $OUT for `apps.export` back on a machine with TensorFlow.
#
#   bash benchmarks/gpu_checklist.sh            # on the GPU machine (.whl and tokens/ carried)
#   SPEED=0 RUNS="classifier-bf16 translator-bf16" BUDGET_MINUTES=1.5 bash benchmarks/gpu_checklist.sh
#   QUICK=1 OUT=/tmp/out PYTHON=.venv/bin/python bash benchmarks/gpu_checklist.sh   # CPU smoke run
#   SPEED=0 RUNS=pretrained-bf16 BUDGET_MINUTES=1 bash benchmarks/gpu_checklist.sh
#       # fine-tunes the float16 copy of a checkpoint ($PRETRAINED, carried) from its
#       # token folder ($PRETRAINED_TOKENS); its weights come back in float16
#
# Each step has its own time limit and a failed step does not stop the rest,
# so one call always brings back what did run. The limits add up to about
# eight and a half minutes.
set -u
OUT=${OUT:?set OUT to the folder that comes back}
PYTHON=${PYTHON:-python3}
QUICK=${QUICK:-0}
BUDGET_MINUTES=${BUDGET_MINUTES:-2.5}
SPEED=${SPEED:-1}
RUNS=${RUNS:-classifier-f32 classifier-bf16 translator-f32 translator-bf16}
# Paths relative to the working tree: the run's settings.json names the checkpoint,
# and the same path holds it back here.
PRETRAINED=${PRETRAINED:-checkpoints/minilm-f16}
PRETRAINED_TOKENS=${PRETRAINED_TOKENS:-tokens/bbc-minilm}
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
LOG=$OUT/checklist.log
exec > >(tee -a "$LOG") 2>&1

step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; }

if [ -d .whl ] && ! $PYTHON -c "import keras" 2>/dev/null; then
    step "install the carried wheels"
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null
$PYTHON -c "import jax, keras; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__)"

step "layers against Keras' (fused attention)"
if [ "$SPEED" = 0 ]; then
    echo "skipped (SPEED=0)"
elif [ "$QUICK" = 1 ]; then
    timeout 300 $PYTHON benchmarks/gpu_speed_jax.py --quick --no-seq2seq \
        --output "$OUT/gpu_speed_jax.json"
else
    timeout 210 $PYTHON benchmarks/gpu_speed_jax.py --only t512 --rounds 7 \
        --policies float32,mixed_bfloat16 --no-seq2seq --output "$OUT/gpu_speed_jax.json"
fi
echo "gpu_speed_jax exit $?"

step "model.fit on JAX from token folders, side by side: $RUNS"
mkdir -p "$OUT/runs"
fit() {  # name app token-folder extra-flags...
    local name=$1 app=$2 tokens=$3
    shift 3
    timeout "$(awk "BEGIN { print int($BUDGET_MINUTES * 60 + ${FIT_GRACE_SECONDS:-120}) }")" $PYTHON -m "apps.$app" --data "tokens:$tokens" \
        --time-budget "$BUDGET_MINUTES" --run-dir "$OUT/runs/$name" --verbose 2 "$@" \
        > "$OUT/runs/$name.log" 2>&1
    echo "$name exit $?"
}
# `wait` with no pids would also wait for the tee above, which never ends.
pids=()
for run in $RUNS; do
    case $run in
        classifier-f32) fit "$run" train_classifier tokens/bbc & ;;
        classifier-bf16) fit "$run" train_classifier tokens/bbc --mixed-precision bfloat16 & ;;
        translator-f32) fit "$run" train_translator tokens/bible-es-en --batch-size 256 & ;;
        translator-bf16)
            fit "$run" train_translator tokens/bible-es-en --batch-size 256 \
                --mixed-precision bfloat16 &
            ;;
        pretrained-f32)
            fit "$run" train_classifier "$PRETRAINED_TOKENS" --pretrained "$PRETRAINED" &
            ;;
        pretrained-bf16)
            fit "$run" train_classifier "$PRETRAINED_TOKENS" --pretrained "$PRETRAINED" \
                --mixed-precision bfloat16 &
            ;;
        *) echo "unknown run $run" && continue ;;
    esac
    pids+=($!)
done
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
for log in "$OUT"/runs/*.log; do echo "--- $log"; tail -n 15 "$log"; done

step "pack the run folders"
# What comes back is at most 8 files of 16 MiB and 64 MiB in all. A finished
# run needs only model.keras to be exported; an unfinished one its best
# checkpoint. The weights least needed are dropped first when it is too large.
cd "$OUT"
# A run the time limit killed leaves its backup (the model and its optimizer,
# for --resume), which nothing here resumes from.
for run in runs/*/; do
    if [ -f "$run/model.keras" ]; then rm -rf "$run/checkpoints"; else rm -f "$run/checkpoints/last.keras"; fi
    rm -rf "$run/backup"
done
# A saved model carries its optimizer's slots (Adam: twice the weights);
# exporting needs only the weights, so each file is saved again without them.
# A fine-tuned checkpoint's are also stored in float16 (MiniLM-L6 and its bag of
# n-grams: 50 MiB, not 100).
(cd "$OLDPWD" && $PYTHON benchmarks/strip_optimizer.py "$OUT"/runs/{classifier,translator}-*/model.keras \
    "$OUT"/runs/{classifier,translator}-*/checkpoints/best.keras
    $PYTHON benchmarks/strip_optimizer.py --float16 "$OUT"/runs/pretrained-*/model.keras \
        "$OUT"/runs/pretrained-*/checkpoints/best.keras)
for drop in "" pretrained-f32 translator-f32 classifier-f32 classifier-bf16 translator-bf16 \
    pretrained-bf16; do
    [ -n "$drop" ] && rm -rf "runs/$drop/model.keras" "runs/$drop/checkpoints" \
        && echo "left out the weights of runs/$drop"
    tar -czf runs.tgz runs
    [ "$(stat -c %s runs.tgz)" -lt $((56 * 1024 * 1024)) ] && break
done
split -b 15M -d runs.tgz runs.tgz.part-
rm -rf runs runs.tgz
ls -la "$OUT"
