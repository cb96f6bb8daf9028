# The cache-reuse curve timed three times per calibration (plan.CACHE_REPEATS): three quick fp32 runs in a row, the
# three families against q1, then a full bf16 run; what spread calibrate measures on this VM, and the quick wall time
set -x
date -u +%H:%M:%S
cut -d' ' -f1-3 /proc/loadavg
cat /proc/pressure/cpu
for i in 1 2 3; do
  /usr/bin/time -f "calibrate q$i wall %e s" rooflinesim calibrate --quick --dtype fp32 --no-progress --out /tmp/z4/q$i.yaml
  date -u +%H:%M:%S
done
/usr/bin/time -f "validate wall %e s" rooflinesim validate --family hf,gptfast,project --profile /tmp/z4/q1.yaml --dtype fp32 --out-dir /tmp/z4/vq1 --no-progress --no-plot
date -u +%H:%M:%S
/usr/bin/time -f "calibrate full bf16 wall %e s" rooflinesim calibrate --budget 360 --dtype bf16 --no-progress --out /tmp/z4/full-bf16.yaml
date -u +%H:%M:%S
cat /proc/pressure/cpu
