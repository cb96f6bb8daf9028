set -x
date -u +%H:%M:%S
cut -d' ' -f1-3 /proc/loadavg
/usr/bin/time -f "calibrate wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --no-progress --out /tmp/z3/full.yaml
date -u +%H:%M:%S
/usr/bin/time -f "validate wall %e s" rooflinesim validate --family hf,gptfast,project --profile /tmp/z3/full.yaml --dtype fp32 --out-dir /tmp/z3/vf --no-progress --no-plot
date -u +%H:%M:%S
