"""Is an HF hold-out step's speed a property of the moment or of the build? Four builds of one HF hold-out model
(fresh allocations, same seed) kept in memory and timed round-robin for ROUNDS rounds: a decode step at
(batch, context) each, as `validate --family hf` times it. If builds differ and each keeps its speed across
rounds, where the weights landed decides; if all move together from round to round, the moment does.
2-core AMD EPYC (Zen 3) VM, fp32, 2026-12-07."""
import sys, time, json
import numpy as np
import torch
from rooflinesim.calibrate.external.hf_holdout import (HF_HOLD_OUTS, HfDecodeStep, build_hf_model, make_config,
                                                       default_process_heap)
from rooflinesim.calibrate.measure.timers import Timer, select_device

NAME = sys.argv[1] if len(sys.argv) > 1 else "hf-qwen2-85m"
BATCH, CONTEXT = int(sys.argv[2]) if len(sys.argv) > 2 else 4, int(sys.argv[3]) if len(sys.argv) > 3 else 2048
BUILDS, ROUNDS = 4, 5
device = select_device("cpu")
timer = Timer(device)
entry = next(e for e in HF_HOLD_OUTS if e.name == NAME)
config = make_config(entry)
times = np.zeros((ROUNDS, BUILDS))
with default_process_heap(), torch.inference_mode():
    models = [build_hf_model(config, torch.float32, device.torch_device, seed=200) for _ in range(BUILDS)]
    t0 = time.time()
    for r in range(ROUNDS):
        for b, model in enumerate(models):
            step = HfDecodeStep(model, BATCH, CONTEXT, seed=0)
            times[r, b] = timer.time(step, min_calls=5, min_time_s=0.15, max_calls=50, warmup_s=0.0, warmup_calls=1,
                                     before=step.rewind).estimate_s
            step = None
        print(f"round {r} ({time.time() - t0:.0f} s): " + "  ".join(f"b{b} {times[r, b] * 1e3:7.2f} ms"
                                                                   for b in range(BUILDS)), flush=True)
rel = times / np.median(times)
print(f"{NAME} batch {BATCH} context {CONTEXT}: median {np.median(times) * 1e3:.2f} ms; spread across builds "
      f"(per-round max/min) {np.median(times.max(1) / times.min(1)):.2f}x median; across rounds (per-build max/min) "
      f"{np.median(times.max(0) / times.min(0)):.2f}x median")
# two-way decomposition of log times: build effect, round effect, residual
x = np.log(times); g = x.mean()
build_eff = x.mean(0) - g; round_eff = x.mean(1) - g
resid = x - g - build_eff[None, :] - round_eff[:, None]
print(f"sd of log time: builds {build_eff.std(ddof=1):.3f}, rounds {round_eff.std(ddof=1):.3f}, residual "
      f"{resid.std(ddof=1):.3f}")
json.dump({"model": NAME, "batch": BATCH, "context": CONTEXT, "times_s": times.tolist()},
          open(f"build-placement-{NAME}-{BATCH}x{CONTEXT}.json", "w"))
