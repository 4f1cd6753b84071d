"""Quick same-run CPU speed check on the default model: engine (fp32, bf16) against the paper-faithful
per-edge loop, RR and LR. Its output is the CPU table of bench/RESULTS.md. Run: python bench/speed_check.py"""
import numpy as np, time, torch, json
from transformers import AutoModelForCausalLM, AutoTokenizer
from rr_fast.backends.torch import TorchBackend
from rr_fast.engine import Engine, ScoreConfig
from rr_fast.reference import reference_scores
from rr_fast.text import tokenize, candidate_edges
from rr_fast.models import resolve
folder = resolve("smollm2-135m")
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32", attn_implementation="sdpa")
text = open("/work/shared/data/passages/moby_dick.txt").read()[50000:58000]
t = tokenize(tok, text); e = candidate_edges(text, t).tokens
n = len(t); print("tokens", n, "edges", len(e), "threads", torch.get_num_threads(), flush=True)
out = {"tokens": n, "edges": len(e)}
def loop(readouts, k=16):
    with torch.inference_mode():
        s = time.perf_counter(); model(input_ids=torch.tensor([t.ids.tolist()]), output_hidden_states=True, use_cache=False); full = time.perf_counter() - s
    s = time.perf_counter(); reference_scores(model, t.ids, e[:k], [], 23, readouts=readouts); el = time.perf_counter() - s
    return full + (el - full) / k * len(e)  # reference_scores repeats the full pass once
for readouts in (("rr",), ("lr",)):
    base = loop(readouts)
    out[f"loop_{readouts[0]}"] = base
    print(f"per-edge loop {readouts}: {base:.1f}s {n/base:.1f} tok/s", flush=True)
    for dtype in ("float32", "bfloat16"):
        m = model if dtype == "float32" else AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa")
        eng = Engine(TorchBackend(m), [], ScoreConfig(readouts=readouts))
        s = time.perf_counter(); sc = eng.score(t.ids, e); el = time.perf_counter() - s
        out[f"engine_{readouts[0]}_{dtype}"] = el
        print(f"engine {readouts} {dtype}: {el:.1f}s {n/el:.1f} tok/s ratio {base/el:.2f}x split {dict((k, round(v,2)) for k,v in eng.timings.items())}", flush=True)
        if dtype == "float32":
            ref32 = sc
        else:
            d = np.nanmax(np.abs(sc[readouts[0]] - ref32[readouts[0]])); print(f"  bf16 vs fp32 max diff {d:.2e}", flush=True)
            out[f"bf16_diff_{readouts[0]}"] = float(d)
print(json.dumps(out))
