import torch, time, sys
from rooflinesim.calibrate.external.hf_holdout import *
from rooflinesim.calibrate.measure.timers import select_device, default_process_heap
dev = select_device("cpu")
name, b, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = make_config(get_hf_hold_out(name)); m = build_hf_model(cfg, torch.float32)
with default_process_heap(), torch.inference_mode():
    st = HfDecodeStep(m, b, c)
    ts=[]
    for i in range(20):
        st.reset(); t=time.perf_counter(); st(); ts.append((time.perf_counter()-t)*1e3)
    print("reset :", " ".join(f"{x:.0f}" for x in ts))
    # generate-like: keep appending
    st.reset(); ts=[]
    pos = c
    for i in range(20):
        st.kwargs["position_ids"] = torch.full((b,1), pos); st.kwargs["cache_position"]=torch.tensor([pos])
        t=time.perf_counter(); st(); ts.append((time.perf_counter()-t)*1e3); pos+=1
    print("chain :", " ".join(f"{x:.0f}" for x in ts))
