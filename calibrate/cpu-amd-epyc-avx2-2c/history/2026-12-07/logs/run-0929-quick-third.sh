# the quick spread again, a third window, at 09:30: three quick fp32 runs in a row and the three families
# against q1 (no full run), to see whether the quick goals hold in another window
date -u +%H:%M:%S
cut -d' ' -f1-3 /proc/loadavg
cat /proc/pressure/cpu
for i in 1 2 3; do
  /usr/bin/time -f "calibrate q$i wall %e s" rooflinesim calibrate --quick --dtype fp32 --no-progress --out /tmp/z7/q$i.yaml
  date -u +%H:%M:%S
done
/usr/bin/time -f "validate wall %e s" rooflinesim validate --family hf,gptfast,project --profile /tmp/z7/q1.yaml --dtype fp32 --out-dir /tmp/z7/vq1 --no-progress --no-plot
date -u +%H:%M:%S
date -u +%H:%M:%S
cat /proc/pressure/cpu
