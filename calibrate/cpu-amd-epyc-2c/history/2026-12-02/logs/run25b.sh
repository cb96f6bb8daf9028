#!/bin/bash
# issue 25 measurement sequence, quiet machine, serial
cd /work/main
M=/work/meas2
log() { echo "=== $(date -u +%H:%M:%S) $* | $(cat /proc/pressure/cpu | head -1) | load $(cut -d' ' -f1-3 /proc/loadavg)"; }
for i in 1 2 3; do
  log "quick $i"
  /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --out $M/q$i.yaml --no-progress > $M/q$i.log 2>&1
  tail -3 $M/q$i.log
done
log "validate family quick fp32 vs q1"
rooflinesim validate --family hf,gptfast,project --quick --dtype fp32 --profile $M/q1.yaml --out-dir $M/vq1 --no-plot --no-progress > $M/vq1.log 2>&1; tail -15 $M/vq1.log
log "full calibration"
/usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --out $M/full.yaml --no-progress > $M/full.log 2>&1; tail -5 $M/full.log
log "validate family full-grid fp32 vs full"
rooflinesim validate --family hf,gptfast,project --dtype fp32 --profile $M/full.yaml --out-dir $M/vfull-fp32 --no-plot --no-progress > $M/vfull-fp32.log 2>&1; tail -15 $M/vfull-fp32.log
log "validate family quick-grid bf16 vs full"
rooflinesim validate --family hf,gptfast,project --quick --dtype bf16 --profile $M/full.yaml --out-dir $M/vfull-bf16 --no-plot --no-progress > $M/vfull-bf16.log 2>&1; tail -15 $M/vfull-bf16.log
log "calibrate --model hf-llama-94m vs full"
cp $M/full.yaml $M/full-model.yaml
/usr/bin/time -f "wall %e s" rooflinesim calibrate --model $M/hf-llama-94m --profile $M/full-model.yaml --dtype fp32 --no-progress > $M/model.log 2>&1; tail -15 $M/model.log
log "startup"; cd /work/main && python3 benchmarks/bench_startup.py > $M/startup.log 2>&1; tail -5 $M/startup.log
log "predict call"; python3 benchmarks/bench_predict_call.py > $M/predict-call.log 2>&1; tail -14 $M/predict-call.log
log done
