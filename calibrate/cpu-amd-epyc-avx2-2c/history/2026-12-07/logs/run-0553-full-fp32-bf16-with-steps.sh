set -x
date -u +%H:%M:%S
/usr/bin/time -f "calibrate wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --no-progress --out /tmp/z3/full-r2.yaml
date -u +%H:%M:%S
/usr/bin/time -f "calibrate wall %e s" rooflinesim calibrate --budget 360 --dtype bf16 --no-progress --out /tmp/z3/full-bf16.yaml
date -u +%H:%M:%S
