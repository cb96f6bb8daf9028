#!/usr/bin/env python3
"""Print what hold-out decode steps are made of (torch.profiler, per bucket) beside rooflinesim's per-op prices.

    python scripts/decompose-holdout.py --profile calibrate/cpu-amd-epyc-2c/cpu-amd-epyc-2c.yaml --dtype fp32 \
        --model hf-llama-94m,gptfast-llama-101m,reference:gptfast-llama-101m --batch 1,16 --context 2048

--model takes Hugging Face hold-out names (calibrate.external.hf_holdout, needs transformers), gpt-fast-style ones
(calibrate.external.gptfast_model) and `reference:NAME` (NAME a gpt-fast-style or a dense HF hold-out): the same shapes run
through the project's reference decoder (rooflinesim/calibrate/reference/model.py), so one shape set is seen through two implementations. Figures are noisy on a shared machine:
say where and when they were taken. Each model is priced with its implementation profile (hf, gptfast or
reference), so the concatenation's price lands in the kv_cache bucket beside transformers' aten::cat.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from rooflinesim.calibrate.external import decompose as D  # noqa: E402
from rooflinesim.calibrate.external import gptfast_model as G  # noqa: E402
from rooflinesim.calibrate.reference import model as M  # noqa: E402
from rooflinesim.specs.profiles import load_profile  # noqa: E402
from rooflinesim.calibrate.measure.timers import get_torch_dtype, select_device  # noqa: E402
from rooflinesim.scenario.builder import build_scenario  # noqa: E402
from rooflinesim.step import get_step_cost  # noqa: E402
from rooflinesim.units import MILLI  # noqa: E402


def build(name: str, dtype: torch.dtype):
    """(step factory (batch, context) -> (fn, reset), ModelSpec) of one named hold-out."""
    gptfast = {s.name: s for s in G.get_gptfast_specs()}
    if name.startswith("reference:"):
        shapes = name.split(":", 1)[1]
        if shapes in gptfast:
            spec = gptfast[shapes]
        else:  # an HF hold-out's shapes (dense ones) through the reference decoder
            from rooflinesim.calibrate.external import hf_holdout as H

            spec = H.spec_from_config(H.make_config(H.get_hf_hold_out(shapes)))
        model = M.build_decoder(spec, dtype)

        def factory(batch, context):
            model.setup_caches(batch, context + 8)
            tokens, start = torch.zeros(batch, 1, dtype=torch.long), torch.full((batch,), context)
            return (lambda: model(tokens, start, context + 1)), None
        return factory, spec
    if name in gptfast:
        spec = gptfast[name]
        model = G.build_transformer(spec, dtype)

        def factory(batch, context):
            model.setup_caches(batch, context + 1)
            idx, pos = torch.zeros(batch, 1, dtype=torch.long), torch.tensor([context])
            return (lambda: model(idx, pos)), None
        return factory, spec
    from rooflinesim.calibrate.external import hf_holdout as H

    H.require_transformers()
    config = H.make_config(H.get_hf_hold_out(name))
    spec = H.spec_from_config(config)
    model = H.build_hf_model(config, dtype)

    def factory(batch, context):
        step = H.HfDecodeStep(model, batch, context)
        return step, step.rewind
    return factory, spec


def implementation_of(name: str) -> str:
    """The implementation profile a hold-out's steps are priced with (`specs.implementation`)."""
    if name.startswith("reference:"):
        return "reference"
    return "gptfast" if name in {s.name for s in G.get_gptfast_specs()} else "hf"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="calibrate/cpu-amd-epyc-2c/cpu-amd-epyc-2c.yaml")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--model", default="hf-llama-94m,gptfast-llama-101m,reference:gptfast-llama-101m")
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--context", default="2048")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    hw = load_profile(args.profile)
    device = select_device("cpu", args.threads or hw.measured.provenance.threads)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"device: {device.name}; profile {args.profile}; dtype {args.dtype}; load {load}")
    tdtype = get_torch_dtype(args.dtype)
    for name in (n.strip() for n in args.model.split(",") if n.strip()):
        factory, spec = build(name, tdtype)
        for batch in (int(b) for b in args.batch.split(",")):
            for context in (int(c) for c in args.context.split(",")):
                sc = build_scenario(hw, spec, batch, context, weight_dtype=args.dtype, kv_dtype=args.dtype,
                                    activation_dtype=args.dtype, speculative=False, allow_long_context=True,
                                    implementation=implementation_of(name))
                step = get_step_cost(sc.hardware, spec, sc.workload, 1, sc.timing, context, batch)
                with torch.inference_mode():
                    fn, reset = factory(batch, context)
                    fn()  # warm-up
                    d = D.decompose(fn, step, args.calls, reset, spec.vocab_size)
                print()
                print(D.format_table(f"{name} ({spec.num_layers} layers, vocab {spec.vocab_size}) batch {batch} "
                                     f"context {context} {args.dtype}: measured {d.plain_s / MILLI:.2f} ms, priced "
                                     f"{d.predicted_s / MILLI:.2f} ms ({d.predicted_s / d.plain_s - 1:+.0%})",
                                     d, spec.num_layers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
