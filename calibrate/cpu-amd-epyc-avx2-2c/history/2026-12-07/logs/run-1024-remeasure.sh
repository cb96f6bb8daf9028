# the 09:55 round again, half an hour later: a quick fp32 calibration, then the three families measured twice
# (validate --remeasure), so each step's two measurements lie one pass apart; the errors against each pass beside
date -u +%H:%M:%S
cut -d' ' -f1-3 /proc/loadavg
cat /proc/pressure/cpu
/usr/bin/time -f "calibrate wall %e s" rooflinesim calibrate --quick --dtype fp32 --no-progress --out /tmp/rm2/q1.yaml
date -u +%H:%M:%S
/usr/bin/time -f "validate wall %e s" rooflinesim validate --family hf,gptfast,project --profile /tmp/rm2/q1.yaml --dtype fp32 --out-dir /tmp/rm2/v --no-progress --no-plot --remeasure
date -u +%H:%M:%S
cat /proc/pressure/cpu
