#!/usr/bin/env bash
# The GPU checklist (../shared/GPU.md) in one call of the workplace's device tool: run
# from the repository root on a lent GPU machine, which has torch, jinja2, markdown and
# fonttools but no network, so babel and msgspec travel as wheels in .whl/ (docs/gpu.md,
# "Verified on a GPU"). Every step has its own time limit and the script goes on after a
# failed one; the stored runs come back as $OUT/runs.tgz (split if large) and each step's
# output as $OUT/<step>.log. The reports are read, and rendered as PDF, on the
# development machine from the stored runs.
#
#   bash scripts/gpu-check.sh [suite] [hf] [diagnosis] [tuning] [compiled]
#                                               (default: suite, hf and diagnosis)
#
# The wheels, once, here (babel and msgspec for the machine's Python 3.12):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 \
#       --platform manylinux_2_17_x86_64 -d .whl babel msgspec
#
# DIAGNOSIS_S (seconds, default 110), PAIRS (bench/diagnosis.py's --only, default
# transformer) and PROCESSES (its --processes, default 1) size the benchmark to the
# device time left; DEV=cpu PY=.venv/bin/python OUT=/tmp/x tries the script here.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:?run through the device tool, which sets OUT}
DEV=${DEV:-cuda}
PY=${PY:-python3}
if [ "$DEV" = cuda ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
R=/tmp/gpu-runs
export REPORTER_RUNS=$R
steps=${*:-suite hf diagnosis}
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
    "$PY" -c 'import torch, sys; print(torch.__version__, torch.version.cuda,
        torch.backends.cudnn.version(), sys.version.split()[0])'
    nproc
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step() {  # step NAME SECONDS COMMAND...: its output in $OUT/NAME.log, its end here
    local name=$1 limit=$2
    shift 2
    echo "== $name: start $(date -u +%T)"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name: rc=$? end $(date -u +%T)"
    grep -E "Traceback|Error|error:" "$OUT/$name.log" | head -5
}

for s in $steps; do
    case $s in
    suite)  # the default suite as a user runs it (large is taken on a GPU of 40 GiB+)
        step suite 230 "$PY" -m reporter run --device "$DEV" --lang ru --runs $R/suite ;;
    hf)  # library models whose findings are new since the last GPU run
        step hf 100 "$PY" -m reporter run --device "$DEV" --lang en --runs $R/hf \
            --target tests/models/hf.py:t5_train \
            --target tests/models/hf.py:bert_eager_inference \
            --target tests/models/planted.py:per_sample_loop \
            --target tests/models/planted.py:dropout_heavy ;;
    tuning)  # issue #66: the lever timed on the GPU, the Tuning Guide's planted mistakes
        step tuning "${TUNING_S:-150}" "$PY" -m reporter run --device "$DEV" --lang en \
            --runs $R/tuning --target tests/models/planted_lever.py:wide_mlp_train_tf32 \
            --target tests/models/planted_gpu.py:convnet_nchw \
            --target tests/models/planted_gpu.py:convnet_channels_last \
            --target tests/models/planted_h3.py:inference_autograd \
            --target tests/models/planted_h3.py:anomaly_on ${TUNING_MORE:-} ;;
    compiled)  # torch.compile on a GPU: Triton kernels, which no session has seen here
        step compiled "${COMPILED_S:-150}" "$PY" -m reporter run --device "$DEV" --lang en \
            --runs $R/compiled --target transformer-compiled ;;
    diagnosis)  # the benchmark #27 names, its built-in transformer pair
        step diagnosis "${DIAGNOSIS_S:-110}" "$PY" bench/diagnosis.py --device "$DEV" \
            --only "${PAIRS:-transformer}" \
            --processes "${PROCESSES:-1}" ;;
    esac
done

# what each stored run found, for the reply's tail
for run in "$R"/*/*/; do
    [ -f "$run/run.json" ] || continue
    "$PY" -m reporter analyze "$run" --json 2>/dev/null | python3 -c '
import json, sys
name = sys.argv[1]
for p in json.load(sys.stdin)["profiles"]:
    found = ", ".join(f"{f['"'"'rule'"'"']} {f.get('"'"'share'"'"') or 0:.0%}"
                      for f in p.get("findings", []))
    print(f"{name} {p['"'"'label'"'"']} {p['"'"'device_type'"'"']}: {found or '"'"'-'"'"'}")
' "$(basename "$run")"
done
tar czf /tmp/runs.tgz -C /tmp gpu-runs
if [ "$(stat -c %s /tmp/runs.tgz)" -gt 15000000 ]; then
    split -b 15000000 -d /tmp/runs.tgz "$OUT/runs.tgz."
else
    cp /tmp/runs.tgz "$OUT/"
fi
ls -la "$OUT"
