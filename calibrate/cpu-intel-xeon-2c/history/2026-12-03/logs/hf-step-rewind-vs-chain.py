import torch, time, sys
from rooflinesim.calibrate.external.hf_holdout import *
from rooflinesim.calibrate.measure.timers import select_device, default_process_heap
dev = select_device("cpu")
name, b, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = make_config(get_hf_hold_out(name)); m = build_hf_model(cfg, torch.float32)
with default_process_heap(), torch.inference_mode():
    st = HfDecodeStep(m, b, c)
    for mode in ("rewind", "chain", "rewind"):
        ts=[]
        for i in range(16):
            if mode == "rewind": st.rewind()
            t=time.perf_counter(); st(); ts.append((time.perf_counter()-t)*1e3)
        st.rewind()
        print(f"{mode:7s}:", " ".join(f"{x:.0f}" for x in ts), flush=True)
