#!/usr/bin/env bash
# Issue 12's GPU measurements in a few device calls (each within its 10-minute limit).
#
# Here, once:       bash benchmarks/gpu_session.sh prepare
# On the GPU, each stage one `run` call with carry [".gpu"], in this order:
#                   bash benchmarks/gpu_session.sh checks      # ~8 min
#                   bash benchmarks/gpu_session.sh synthetic   # ~8 min
#                   bash benchmarks/gpu_session.sh levers      # ~7 min
#                   bash benchmarks/gpu_session.sh real        # ~9 min
# Each writes $OUT/<stage>.log (line-buffered, so a step cut off by its timeout
# still leaves what it printed) and the JSON figures of its benchmarks to $OUT.
# The device image has jax (CUDA), flax, transformers, torch and tensorstore;
# jaxattn runs from the tree (PYTHONPATH), and the random-weight BERT-base takes
# the embedded model's tokenizer from .gpu/tokenizer (the model is too big to carry).
# Locally, GPU_SESSION_SMOKE=1 runs every step on a few sentences (on the CPU).
set -uo pipefail
stage=${1:?usage: gpu_session.sh prepare|checks|synthetic|levers|real}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ "$stage" = prepare ]; then
  py=${PYTHON:-.venv/bin/python}
  mkdir -p .gpu/tokenizer
  dir=$("$py" -c 'from jaxattn.checkpoints.loading import default_model_dir as d; print(d())') \
    || { echo "prepare: the embedded model is not installed here (bash scripts/setup.sh)" >&2; exit 1; }
  cp "$dir"/tokenizer* "$dir"/vocab* "$dir"/special* .gpu/tokenizer/ || exit 1
  [ -f .gpu/tokenizer/tokenizer.json ] || { echo "prepare: no tokenizer.json in $dir" >&2; exit 1; }
  echo "ready: .gpu/tokenizer ($(du -sh .gpu | cut -f1)); run the stages with carry [\".gpu\"]"
  exit 0
fi

OUT=${OUT:-$root/out/gpu-session}
mkdir -p "$OUT"
py=${PYTHON:-python3}
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export JAXATTN_BENCH_TOKENIZER=$root/.gpu/tokenizer
[ -f .gpu/tokenizer/tokenizer.json ] || { echo "no .gpu/tokenizer: run 'prepare' here first" >&2; exit 2; }
log=$OUT/$stage.log
exec > >(tee -a "$log") 2>&1
tee_pid=$!

smoke=${GPU_SESSION_SMOKE:-}
n() { if [ -n "$smoke" ]; then echo 4; else echo "$1"; fi; }
failed=0
# step SECONDS CMD...: one timed measurement; a step over its time is stopped, the rest go on
# (the stage's exit status counts the steps that failed).
step() {
  local limit=$1 rc
  shift
  echo "== $(date -u +%H:%M:%S) $* (limit ${limit}s)"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@"
  rc=$?
  echo "== rc=$rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
bench=("$py" -m jaxattn bench --overwrite)  # an array: `timeout` runs no shell function

echo "== $stage on $(hostname), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null)"
case "$stage" in
  checks)
    nvidia-smi -L 2>/dev/null
    step 60 "$py" -c 'import jax, flax, transformers, torch; d = jax.devices()[0]
print("jax", jax.__version__, "flax", flax.__version__, "transformers", transformers.__version__,
      "torch", torch.__version__, "cuda", torch.cuda.is_available())
print(d, [m.kind for m in d.addressable_memories()], d.memory_stats() and d.memory_stats().get("bytes_limit"))'
    step 60 "$py" benchmarks/gpu_checks.py zero-copy
    cache=$(mktemp -d)
    for run in cold cached; do
      echo "-- first capture, $run compilation cache"
      JAXATTN_COMPILATION_CACHE=$cache step "$([ $run = cold ] && echo 150 || echo 40)" \
        "$py" benchmarks/first_capture.py --random-bert-base -n "$(n 100)"
    done
    cache=$(mktemp -d)
    # One shape per bucket (18 for BERT-base): the ladder's ~96 would not compile in 10 minutes.
    for run in cold cached; do
      echo "-- Engine.warmup(sizes=\"largest\") of attention, $run compilation cache"
      JAXATTN_COMPILATION_CACHE=$cache step "$([ $run = cold ] && echo 250 || echo 40)" \
        "$py" benchmarks/gpu_checks.py warmup --sizes largest ${smoke:+--buckets 8,16}
    done
    ;;
  synthetic)
    step 200 "${bench[@]}" --synthetic-bert-base 128 -n "$(n 1024)" --json "$OUT/syn128.json"
    step 150 "${bench[@]}" --synthetic-bert-base 128 -n "$(n 1024)" --precision tf32 --json "$OUT/syn128-tf32.json"
    step 130 "${bench[@]}" --synthetic-bert-base 512 -n "$(n 128)" --json "$OUT/syn512.json"
    ;;
  levers)
    # Compile-time levers, one fresh process each, persistent cache off: one shape of
    # BERT-base (T=128, the planned batch), its compile time and its capture speed,
    # with the layers scanned (the GPU default) or unrolled, and XLA's GEMM autotuning
    # as is, on cuBLAS only, or off. Full capture: the two layer loops only.
    tokens=$([ -n "$smoke" ] && echo 16 || echo 128)
    for what in attention attention,queries,keys,fx_norm,alpha_fx_norm,sum_alpha_fx_norm; do
      for loop in scan unrolled; do
        for flags in "" --xla_gpu_enable_triton_gemm=false --xla_gpu_autotune_level=0; do
          [ "$what" = attention ] || [ -z "$flags" ] || continue  # full capture: default flags
          XLA_FLAGS=$flags JAXATTN_LAYER_LOOP=$loop step 70 \
            "$py" benchmarks/gpu_checks.py shape --what "$what" --tokens "$tokens"
        done
      done
    done
    ;;
  real)
    # 512 sentences, not the issue's 2,001: each case compiles every (bucket, batch) shape
    # it meets, at 11-28 s a shape cold on an H100, and this call has 10 minutes.
    step 330 "${bench[@]}" --random-bert-base -n "$(n 512)" --json "$OUT/ewt512.json"
    step 200 "${bench[@]}" --random-bert-base -n "$(n 512)" --precision tf32 --json "$OUT/ewt512-tf32.json"
    ;;
  *)
    echo "unknown stage $stage: prepare, checks, synthetic, levers or real" >&2
    exit 2
    ;;
esac
echo "== $stage done at $(date -u +%H:%M:%S): $failed step(s) failed"
exec >&- 2>&-
wait "$tee_pid"  # the log's last lines are written before the files go back
exit $((failed > 0))
