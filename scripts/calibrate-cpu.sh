#!/usr/bin/env bash
# The CPU measurements behind the README's calibration, acceptance and serving figures, run back to back in one quiet
# window: a --quick calibration (timed: the <= 30 s goal), the full calibration sized to $BUDGET seconds, the
# speculative loop on real acceptance (`acceptance validate`), the measured serving loop (`validate --serve`), and the
# validation of both profiles on the full grid (named hold-outs, the randomised family, the speculative loop, every
# dtype), then on the hold-outs written outside the project (`validate --family hf,gptfast,project`; hf needs
# rooflinesim[hf]). The profiles note the CPU pressure and the CLI warns when other processes contended.
#
#   BUDGET=360 bash scripts/calibrate-cpu.sh   # ~20 s quick + ~5 min calibrate + ~2 min acceptance + ~3 min
#                                              # serving loop + 2 x ~4 min validate + ~4 + ~2 min --family (2-core CPU)
#
# The loops run right after the calibration; each validation states how far the machine's speed was from the
# profile's while it ran (rooflinesim.calibrate.measure.anchor).
#
# Writes into calibrate/<device-slug>/ (calibrate/README.md): <device-slug>{,-quick}.yaml, their
# -validation.{json,png} and -hf-gptfast-project-validation.json, <device-slug>-acceptance-loop.{json,png},
# <device-slug>-serve-validation.{json,png} and the logs in logs/<device-slug>-*.log. Move the files a run replaces
# into history/<YYYY-MM-DD>/ first and index them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-360}
# calibrate's own default dtypes (fp32, and bf16 where the CPU has bf16 dot products: without them torch converts,
# and the bf16 validations would outrun the timeouts below); DTYPES=fp32,bf16 asks for others
DTYPE_ARGS=()
if [ -n "${DTYPES:-}" ]; then DTYPE_ARGS=(--dtype "$DTYPES"); fi
NAME=$(python3 -c "from rooflinesim.calibrate.measure.timers import select_device; print(select_device('cpu').slug)")
DIR="calibrate/$NAME"
mkdir -p "$DIR/logs"
LOG="$DIR/logs/$NAME"
echo "device $NAME, dtypes ${DTYPES:-the default}, load: $(cut -d' ' -f1-3 /proc/loadavg), cpu pressure: $(head -1 /proc/pressure/cpu 2>/dev/null)"
/usr/bin/time -f "quick calibrate wall %e s" python3 -m rooflinesim.cli calibrate --quick "${DTYPE_ARGS[@]}" --no-progress \
    --out "$DIR/$NAME-quick.yaml" 2>&1 | tee "$LOG-calibrate-quick.log"
timeout $((BUDGET + 300)) python3 -m rooflinesim.cli calibrate --budget "$BUDGET" "${DTYPE_ARGS[@]}" --no-progress \
    --out "$DIR/$NAME.yaml" 2>&1 | tee "$LOG-calibrate.log"
# the measured loops first, closest in time to the calibration (each also re-times the profile's machine-speed
# anchors and reports how far the machine's speed was from the profile's while it ran)
timeout 1200 python3 -m rooflinesim.cli acceptance validate --profile "$DIR/$NAME.yaml" \
    --out "$DIR/$NAME-acceptance-loop.json" 2>&1 | tee "$LOG-acceptance-validate.log"
timeout 1200 python3 -m rooflinesim.cli validate --serve --profile "$DIR/$NAME.yaml" --out-dir "$DIR" \
    --no-progress 2>&1 | tee "$LOG-validate-serve.log"
timeout 2400 python3 -m rooflinesim.cli validate --profile "$DIR/$NAME.yaml" --out-dir "$DIR" --no-progress \
    2>&1 | tee "$LOG-validate.log"
# both profiles describe the same device, so validate names both reports <device>-validation: the quick one is
# written aside and renamed
QUICK_DIR=$(mktemp -d)
timeout 2400 python3 -m rooflinesim.cli validate --profile "$DIR/$NAME-quick.yaml" --out-dir "$QUICK_DIR" \
    --no-progress 2>&1 | tee "$LOG-validate-quick.log"
for ext in json png; do mv "$QUICK_DIR/$NAME-validation.$ext" "$DIR/$NAME-quick-validation.$ext"; done
# the hold-outs nobody in the project wrote (Hugging Face transformers models, a gpt-fast-style decoder) beside the
# project's own family, against both profiles: the README's accuracy headline. Against the full profile every step
# is measured twice (--remeasure): how far the two passes lie apart is the machine's own floor under the errors
FAMILIES=gptfast,project
if python3 -c "import transformers" 2>/dev/null; then FAMILIES=hf,$FAMILIES; else
    echo "transformers is not importable (pip install -e '.[hf]'): the HF hold-out is left out"
fi
timeout 1800 python3 -m rooflinesim.cli validate --family "$FAMILIES" --profile "$DIR/$NAME.yaml" --out-dir "$DIR" \
    --no-progress --remeasure 2>&1 | tee "$LOG-validate-family.log"
timeout 1200 python3 -m rooflinesim.cli validate --family "$FAMILIES" --profile "$DIR/$NAME-quick.yaml" \
    --out-dir "$QUICK_DIR" --no-progress 2>&1 | tee "$LOG-validate-family-quick.log"
REPORT="${FAMILIES//,/-}-validation.json"
mv "$QUICK_DIR/$NAME-$REPORT" "$DIR/$NAME-quick-$REPORT"
echo "done; load: $(cut -d' ' -f1-3 /proc/loadavg), cpu pressure: $(head -1 /proc/pressure/cpu 2>/dev/null)"
