#!/usr/bin/env bash
# issue 25: three quick fp32 runs with 12 timed calls at every KV-concat point (the change of 9cacf19, uncommitted
# then), each 48 MiB point's call rates printed, then the 12:59 HF measurements repriced with them;
# 2-core Intel Xeon VM with AMX, 2026-12-03
cd /work/meas/y/o
for i in 1 2 3; do python3 ../capq.py q$i calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:"; done
python3 - <<'PY'
import pickle, glob
for f in sorted(glob.glob("/work/meas/y/o/*.pkl")):
    r = pickle.load(open(f,"rb"))["results"]
    for k, s in r.samples.items():
        if getattr(k,"kind",None)=="kv_concat" and k.size>=40*2**20:
            b = 2*2*k.size
            print(f.split("/")[-2:], k.size/2**20, " GB/s:", " ".join(f"{b/x/1e9:.1f}" for x in s))
PY
python3 /work/main/scripts/reprice-holdout.py ../n/vq1/*.json q1.yaml q2.yaml q3.yaml ../n/q1.yaml ../n/q2.yaml ../n/q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
