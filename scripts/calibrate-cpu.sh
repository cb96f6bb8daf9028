#!/usr/bin/env bash
# The final CPU measurement of issue 12, time-bounded: a --quick run (timed: the <= 30 s goal), the full calibration
# sized to $BUDGET seconds, and its validation (named hold-outs, the randomised family, the speculative loop, every
# dtype). Run it in a quiet window: the profile notes the CPU pressure and the CLI warns when other processes
# contended for the cores.
#
#   BUDGET=900 bash scripts/calibrate-cpu.sh   # <= 30 s quick + <= 15 min calibrate + ~10-20 min validate + ~3-5 min quick validate (2-core CPU)
#
# Writes calibrate/<device-slug>.yaml, calibrate/<device-slug>-validation.{json,png} and the logs in calibrate/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-900}
LOGS=calibrate/logs
mkdir -p "$LOGS"
NAME=$(python3 -c "from rooflinesim.calibrate.timers import select_device; print(select_device('cpu').slug)")
echo "device $NAME, load: $(cut -d' ' -f1-3 /proc/loadavg), cpu pressure: $(head -1 /proc/pressure/cpu 2>/dev/null)"
/usr/bin/time -f "quick calibrate wall %e s" python3 -m rooflinesim.cli calibrate --quick --no-progress \
    --out "/tmp/$NAME-quick.yaml" 2>&1 | tee "$LOGS/calibrate-quick.log"
timeout $((BUDGET + 300)) python3 -m rooflinesim.cli calibrate --budget "$BUDGET" --no-progress \
    --out "calibrate/$NAME.yaml" 2>&1 | tee "$LOGS/calibrate.log"
timeout 2400 python3 -m rooflinesim.cli validate --profile "calibrate/$NAME.yaml" --out-dir calibrate --no-progress \
    2>&1 | tee "$LOGS/validate.log"
timeout 1200 python3 -m rooflinesim.cli validate --quick --profile "/tmp/$NAME-quick.yaml" --out-dir /tmp \
    --no-progress 2>&1 | tee "$LOGS/validate-quick.log"
