# probe (issue 25, 2026-12-03 13:41; run again at 13:45 with block-1536 only, four builds, twice): block-1536 (batch 1) and block-768 (batch 8) timed in several fresh builds in one process: how much of a
# quick run's decoder reading is the build (where its weights landed) and how much the moment (issue 25)
import time, statistics, torch
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.reference import model as M
from rooflinesim.calibrate.fitting.plan import get_decoder_spec, DECODER_CONTEXT
dev = select_device("cpu")
for name, batch in (("block-1536", 1), ("block-768", 8)):
    for build in range(6):
        model = M.build_decoder(get_decoder_spec(name), torch.float32, dev.torch_device)
        model.setup_caches(batch, DECODER_CONTEXT + 9)
        tokens = torch.zeros(batch, 1, dtype=torch.long); start = torch.full((batch,), DECODER_CONTEXT)
        xs = []
        with torch.inference_mode():
            model(tokens, start, DECODER_CONTEXT + 1)
            for _ in range(8):
                s = time.perf_counter(); model(tokens, start, DECODER_CONTEXT + 1); xs.append((time.perf_counter() - s) * 1e3)
        print(name, batch, "build", build, " ".join(f"{x:.2f}" for x in xs), flush=True)
        model = None
