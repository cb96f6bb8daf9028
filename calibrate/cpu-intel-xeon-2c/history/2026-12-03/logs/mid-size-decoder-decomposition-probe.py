# probe: block-1536 / block-768 (the quick rung's mid-size decoders) decode step under torch.profiler vs the
# per-op prices of a profile with its in-model scale set to 1 (issue 25: what the bf16 scale learns)
import sys, torch
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.reference import model as M
from rooflinesim.calibrate.fitting.plan import get_decoder_spec, DECODER_CONTEXT
from rooflinesim.calibrate.external.decompose import decompose, format_table
from rooflinesim.specs.profiles import load_profile
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.step import get_step_cost
dev = select_device("cpu")
prof, dtype = sys.argv[1], sys.argv[2]
td = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
hw = load_profile(prof)
m = hw.measured
hw1 = hw.model_copy(update={"measured": m.model_copy(update={"dtypes": {d: p.model_copy(update={"in_model_scale": 1.0, "in_model_layer_overhead_s": 0.0}) for d, p in m.dtypes.items()}})})
for name in sys.argv[3:]:
    spec = get_decoder_spec(name)
    for batch in (1, 8):
        dec = M.build_decoder(spec, td, dev.torch_device)
        dec.setup_caches(batch, DECODER_CONTEXT + 16)
        tokens = torch.zeros(batch, 1, dtype=torch.long)
        start = torch.full((batch,), DECODER_CONTEXT, dtype=torch.long)
        sc = build_scenario(hw1, spec, batch, DECODER_CONTEXT, weight_dtype=dtype, kv_dtype=dtype, activation_dtype=dtype,
                            speculative=False, allow_long_context=True, engine="ideal")
        st = get_step_cost(sc.hardware, spec, sc.workload, 1, sc.timing, DECODER_CONTEXT, batch)
        with torch.inference_mode():
            d = decompose(lambda: dec(tokens, start, DECODER_CONTEXT + 1), st, calls=8, vocab=spec.vocab_size)
        print(format_table(f"{name} batch {batch} {dtype} (scale 1)", d, spec.num_layers), flush=True)
        dec = None
