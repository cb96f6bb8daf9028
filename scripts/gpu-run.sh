#!/usr/bin/env bash
# The one prepared GPU run of issue 4: calibrate (--quick, bf16) on the CUDA device, then validate the hold-out
# decoder and its speculative loop against the fresh profile. Everything lands in $OUT (default: calibrate/).
#
# Made for a borrowed machine whose python3 already holds a CUDA build of torch: it installs nothing over the
# network and runs the package from the checkout (PYTHONPATH). Packages missing there (pydantic, for one) can be
# carried as wheels in .whl/ and are installed into /tmp/site first.
#
#   OUT=/some/dir bash scripts/gpu-run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-calibrate}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))
PY
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
NAME=$(python3 -c "from rooflinesim.calibrate.measure.timers import select_device; print(select_device('cuda').slug)")
set -o pipefail
python3 -m rooflinesim.cli calibrate --device cuda --dtype bf16 --quick --no-progress --out "$OUT/$NAME.yaml" \
    2>&1 | tee "$OUT/calibrate.log"
python3 -m rooflinesim.cli validate --device cuda --profile "$OUT/$NAME.yaml" --out-dir "$OUT" --no-progress \
    2>&1 | tee "$OUT/validate.log"
ls -l "$OUT"
