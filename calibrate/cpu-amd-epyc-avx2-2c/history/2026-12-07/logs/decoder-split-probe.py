"""How stable is the quick decoder fit's split (in-model scale / per-layer costs), and which decoder set pins it?
Times the tiny and mid-size calibration decoders in ROUNDS interleaved, shuffled rounds (quick plan's call counts,
3 builds of each mid-size one per round), then per round fits `fit_profile.fit_overheads` with several sets of
mid-size decoders on top of a quick profile's per-op tables, and prices the HF hold-out rows of fixed measurement
sets with each fit. 2-core AMD EPYC (Zen 3) VM, fp32, 2026-12-07."""
import json, random, sys, time, glob, dataclasses
import numpy as np
import torch
from rooflinesim.calibrate.measure.timers import select_device, Timer
from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
from rooflinesim.calibrate.measure.benchmarks.decoder import decoder_jobs
from rooflinesim.calibrate.fitting.plan import Plan, StepTokens
from rooflinesim.calibrate.fitting.budget import get_level_plan
from rooflinesim.calibrate.fitting.measurements import Results
from rooflinesim.calibrate.fitting.fit_profile import fit_overheads
from rooflinesim.specs.profiles import load_profile

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
BASE = sys.argv[2] if len(sys.argv) > 2 else "q3.yaml"
MODELS = ("block-768", "block-1536", "block-768-16l", "block-2048")
device = select_device("cpu")
steady = get_level_plan("steady", ("fp32",), device)
plan = dataclasses.replace(steady, block_models=MODELS)
ctx = BenchContext(device, "fp32", plan, Timer(device, flush_l2=False))
rounds = []
t0 = time.time()
for r in range(ROUNDS):
    jobs = decoder_jobs(ctx)
    # the builds of a model stay together (a build is shared by its token configurations), the models shuffled
    groups = {}
    for job in jobs:
        groups.setdefault((job.key.name, job.key.build), []).append(job)
    order = list(groups.values()); random.Random(r).shuffle(order)
    res = Results()
    for g in order:
        for job in g:
            res.add(job.key, job.run())
    rounds.append(res)
    print(f"round {r} done at {time.time() - t0:.0f} s", flush=True)
rows = [{f"{k.name}/{k.batch}x{k.new_tokens}": v for k, v in res.get_decoder_rows().items()} for res in rounds]
json.dump(rows, open(f"decoder-split-rows-{int(t0)}.json", "w"), indent=1)
hw = load_profile(BASE)
prof = hw.measured.dtypes["fp32"]
SETS = {"now": ("block-768", "block-1536"), "w16l": ("block-768", "block-1536", "block-768-16l"),
        "w2048": ("block-768", "block-1536", "block-2048"), "all": MODELS}
for name, models in SETS.items():
    for r, res in enumerate(rounds):
        sub = Results()
        sub.samples = {k: v for k, v in res.samples.items() if k.name.startswith("overhead") or k.name in models}
        p = fit_overheads("fp32", prof, sub)
        print(f"{name:24s} r{r}: scale {p.in_model_scale:.3f} layer {p.layer_overhead_s*1e6:4.0f} us in-model "
              f"{p.in_model_layer_overhead_s*1e6:4.0f} us step {p.step_overhead_s*1e6:4.0f} us "
              f"fit res {p.residuals['decoder_fit_median_abs_rel']:.3f}", flush=True)
        from rooflinesim.specs.profiles import write_profile
        out = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, "fp32": p}})})
        write_profile(out, f"split-{name}-r{r}.yaml")
