"""Does the calibration process's own memory slow its decoders? block-1536 and block-768 timed as `calibrate` times
them (full plan's settings, batch 1 and 4, decode), in fresh processes: with nothing else allocated ("bare"), or
after the full plan's cold pool (1 GiB) was allocated, filled and read through by cold GEMVs and kept ("pool"), or
after the full plan's two largest attention configurations were timed (their caches allocated and freed: "attn").
Conditions alternate process by process. 2-core AMD EPYC (Zen 3) VM, fp32, 2026-12-07.

    python pool-state-probe.py [PAIRS] [pool|attn]"""
import json
import subprocess
import sys

CHILD = r"""
import json, sys, dataclasses
import torch, torch.nn.functional as F
from rooflinesim.calibrate.fitting.budget import get_level_plan
from rooflinesim.calibrate.fitting.measurements import DecoderKey
from rooflinesim.calibrate.fitting.plan import StepTokens
from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
from rooflinesim.calibrate.measure.benchmarks.decoder import _decoder_runner
from rooflinesim.calibrate.measure.timers import Timer, select_device
device = select_device("cpu")
plan = dataclasses.replace(get_level_plan("full", ("fp32",), device), block_tokens=(StepTokens(1, 1), StepTokens(4, 1)))
ctx = BenchContext(device, "fp32", plan, Timer(device, flush_l2=False))
if sys.argv[1] == "pool":
    weights = ctx.rotating_weights(1536, 4096)
    x = torch.randn(1, 1536)
    for w in weights:
        F.linear(x, w)
if sys.argv[1] == "attn":  # the full plan's two largest attention configurations first (caches allocated, freed)
    from rooflinesim.calibrate.measure.benchmarks.attention import _attention_runner
    keys = sorted(plan.attention_keys("fp32"), key=lambda k: k.batch * k.kv_heads * k.context_tokens * k.head_dim)
    for key in keys[-2:]:
        _attention_runner(ctx, key)()
out = {}
for name in ("block-1536", "block-768"):
    for b in (1, 4):
        out[f"{name} b{b}"] = _decoder_runner(ctx, DecoderKey(name, b, 1))().estimate_s
print(json.dumps(out))
"""
pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
MODE = sys.argv[2] if len(sys.argv) > 2 else "pool"
results = {"bare": [], MODE: []}
for i in range(pairs):
    for mode in (("bare", MODE) if i % 2 == 0 else (MODE, "bare")):
        row = json.loads(subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                                        check=True).stdout.strip().splitlines()[-1])
        results[mode].append(row)
        print(mode, {k: round(v * 1e3, 2) for k, v in row.items()}, flush=True)
for key in results["bare"][0]:
    bare = sorted(r[key] for r in results["bare"])
    pool = sorted(r[key] for r in results[MODE])
    med = lambda v: v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    print(f"{key}: bare {med(bare) * 1e3:.2f} ms, {MODE} {med(pool) * 1e3:.2f} ms, {MODE} / bare {med(pool) / med(bare):.3f}")
