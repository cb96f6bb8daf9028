"""`rooflinesim calibrate --model PATH_OR_NAME`: the user's own model timed at a handful of (batch, context, new
tokens) points, its own terms fitted on top of the device profile, and checked at points it did not time.

The model is a Hugging Face `config.json`, a local checkpoint folder holding one (its weights are not needed for
timing: the model is built from the config with random weights), or a shipped model name / model YAML. It runs in
`transformers` (`--impl hf`, the default for a config when the `hf` extra is installed: the implementation such a
user runs) or in the project's reference decoder (`--impl reference`, Llama-style dense models).

The fit: measured = scale x priced + step_overhead_s, least squares in relative error over the timed points (two
terms: what the implementation does per op beyond the profile's prices, and what it costs per step whatever the
shape). The terms are stored in the profile's provenance (`model_terms[model][dtype]`, with the points and the
source), and every price of that model from that profile applies them (`timing.measured.MeasuredTiming.for_model`).
The check points are measured in the same run, interleaved and shuffled with the timed ones, and their error is
recorded next to the terms.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch

from ...errors import InputError
from ...specs.measured import ModelTerms
from ...specs.registry import load_model
from ...units import GIGA, MILLI, get_dtype_bytes
from ..measure.timers import Device, Timer, get_torch_dtype

#: (batch, context, new tokens): decode steps and one verify (k = 4)
TIMED_POINTS = ((1, 256, 1), (16, 256, 1), (4, 2048, 1), (1, 1024, 5))
CHECK_POINTS = ((4, 256, 1), (1, 2048, 1), (16, 1024, 1), (4, 1024, 5), (1, 512, 3))
TINY_TIMED = ((1, 16, 1), (4, 16, 1), (2, 48, 1), (1, 32, 3))
TINY_CHECK = ((2, 16, 1), (1, 48, 1))
MEMORY_SHARE = 0.5


def resolve_source(source: str) -> tuple[Path | None, object]:
    """(the config.json path or None, the ModelSpec) of a config, a checkpoint folder or a model name."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise InputError(f"{source}: no config.json in this folder (a Hugging Face-layout checkpoint is needed)")
    config = path if path.suffix == ".json" and path.is_file() else None
    return config, load_model(str(path) if config else source)


def _check_fits(spec, dtype: str, points) -> None:
    import os

    width = get_dtype_bytes(dtype)
    positions = max(b * (s + q) for b, s, q in points)
    need = spec.params * width + spec.get_kv_bytes_per_token("fp32") * width / 4 * positions * 2  # cache + concat
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > MEMORY_SHARE * have:
        raise InputError(f"timing {spec.name} in {dtype} needs about {need / GIGA:.1f} GB of host memory; this machine "
                         f"has {have / GIGA:.1f} GB: calibrate a smaller model (the terms are per model)")


class ModelSteps:
    """Callables for the model's steps at (batch, context, new tokens), in the chosen implementation."""

    def __init__(self, config_path: Path | None, spec, impl: str, dtype: str, device: Device):
        self.impl, self.spec = impl, spec
        tdtype, self.dev = get_torch_dtype(dtype), device.torch_device
        if impl == "hf":
            import json

            from .hf_holdout import build_hf_model, require_transformers

            require_transformers()
            from transformers import CONFIG_MAPPING

            data = json.loads(config_path.read_text(encoding="utf-8"))
            config = CONFIG_MAPPING[data["model_type"]].from_dict(data)
            config._attn_implementation = "sdpa"
            self.model = build_hf_model(config, tdtype, self.dev, seed=0)
        else:
            from ..reference import model as M

            self.model = M.build_decoder(spec, tdtype, self.dev, seed=0)
            self._caches = {}

    def step(self, batch: int, context: int, q: int):
        """(fn, reset or None) of one step."""
        if self.impl == "hf":
            from .hf_holdout import HfDecodeStep

            with torch.inference_mode():
                step = HfDecodeStep(self.model, batch, context, new_tokens=q)
            return step, step.reset
        key = (batch, context + q)
        if key not in self._caches:
            self._caches = {key: self.model.new_caches(batch, context + q + 8)}  # one cache set in memory
        self.model.set_caches(self._caches[key])
        tokens = torch.zeros(batch, q, dtype=torch.long, device=self.dev)
        start = torch.full((batch,), context, device=self.dev)
        return (lambda: self.model(tokens, start, context + q)), None


def fit_model_terms(predicted, measured) -> tuple[float, float, float]:
    """(scale, step_overhead_s, median |relative residual|) of measured ~ scale x predicted + overhead, least squares
    in relative error, overhead >= 0, scale within the schema's [0.2, 5]."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    a = np.stack([p / m, 1.0 / m], axis=1)
    (scale, overhead), *_ = np.linalg.lstsq(a, np.ones_like(m), rcond=None)
    if overhead < 0 or len(m) < 3:  # too few points for two terms, or a negative overhead: scale alone
        overhead = 0.0
        scale = float(np.sum(p / m) / np.sum((p / m) ** 2))
    scale = float(np.clip(scale, 0.2, 5.0))
    residual = float(np.median(np.abs((scale * p + overhead) / m - 1.0)))
    return scale, float(overhead), residual


def _price(hw, spec, dtype, batch, context, q) -> float:
    from ...scenario.builder import build_scenario
    from ...step import get_workload_step

    sc = build_scenario(hw, spec, batch, context, weight_dtype=dtype, kv_dtype=dtype, activation_dtype=dtype,
                        speculative=False, allow_long_context=True)
    return float(np.asarray(get_workload_step(sc.hardware, spec, sc.workload, q, sc.timing, context,
                                              batch).step_time_s).reshape(-1)[0])


def with_model_terms(hw, name: str, terms: dict | None):
    """The profile with `name`'s terms replaced (None: removed)."""
    prov = hw.measured.provenance
    all_terms = dict(prov.model_terms or {})
    all_terms.pop(name, None)
    if terms:
        all_terms[name] = terms
    measured = hw.measured.model_copy(update={"provenance": prov.model_copy(
        update={"model_terms": all_terms or None})})
    return hw.model_copy(update={"measured": measured})


def run_model_calibration(hw, source: str, device: Device, dtypes, impl: str | None = None, tiny: bool = False,
                          passes: int = 2, seed: int = 0, log=print):
    """Time the model, fit its terms per dtype; (the profile with them, a report dict)."""
    config_path, spec = resolve_source(source)
    if impl is None:
        from .hf_holdout import transformers_available

        impl = "hf" if config_path is not None and transformers_available() else "reference"
    if impl not in ("hf", "reference"):
        raise InputError(f"--impl must be hf or reference, got {impl!r}")
    if impl == "hf" and config_path is None:
        raise InputError(f"--impl hf needs a Hugging Face config.json or checkpoint folder, not {source!r}")
    if impl == "reference" and (spec.moe is not None or spec.mla is not None):
        raise InputError(f"{spec.name}: the reference decoder is dense Llama-style; time it with --impl hf")
    timed, check = (TINY_TIMED, TINY_CHECK) if tiny else (TIMED_POINTS, CHECK_POINTS)
    base = with_model_terms(hw, spec.name, None)
    timer = Timer(device)
    rng = random.Random(seed)
    report = {"model": spec.name, "source": str(source), "implementation": impl, "dtypes": {}}
    all_terms = {}
    for dtype in dtypes:
        if dtype not in hw.measured.dtypes:
            raise InputError(f"the profile measured {', '.join(hw.measured.dtypes)}, not {dtype}")
        _check_fits(spec, dtype, timed + check)
        started = time.perf_counter()
        steps = ModelSteps(config_path, spec, impl, dtype, device)
        samples: dict = {}
        points = list(timed + check)
        for _ in range(passes):
            rng.shuffle(points)
            for point in points:
                fn, reset = steps.step(*point)
                with torch.inference_mode():
                    t = timer.time(fn, min_calls=3, min_time_s=0.0 if tiny else 0.1, max_calls=30, warmup_s=0.0,
                                   warmup_calls=1, before=reset)
                samples.setdefault(point, []).extend(t.samples)
        steps = None
        measured = {pt: float(np.median(sorted(v)[:max(1, (len(v) + 1) // 2)])) for pt, v in samples.items()}
        priced = {pt: _price(base, spec, dtype, *pt) for pt in timed + check}
        scale, overhead, residual = fit_model_terms([priced[p] for p in timed], [measured[p] for p in timed])
        terms = ModelTerms(source=str(source), implementation=impl, scale=scale, step_overhead_s=overhead,
                           batches=tuple(p[0] for p in timed), contexts=tuple(p[1] for p in timed),
                           new_tokens=tuple(p[2] for p in timed), median_abs_rel_residual=residual)
        fitted = with_model_terms(base, spec.name, {**all_terms, dtype: terms})
        rows = []
        for pt in timed + check:
            rows.append({"batch": pt[0], "context_tokens": pt[1], "new_tokens": pt[2], "timed": pt in timed,
                         "measured_s": measured[pt], "device_profile_s": priced[pt],
                         "with_model_terms_s": _price(fitted, spec, dtype, *pt)})
        check_errors = [abs(r["with_model_terms_s"] / r["measured_s"] - 1) for r in rows if not r["timed"]]
        before = [abs(r["device_profile_s"] / r["measured_s"] - 1) for r in rows if not r["timed"]]
        all_terms[dtype] = terms.model_copy(update={"check_median_abs_rel_error": float(np.median(check_errors))})
        report["dtypes"][dtype] = {
            "scale": scale, "step_overhead_s": overhead, "timed_residual": residual, "rows": rows,
            "check_median_error": float(np.median(check_errors)), "check_p90_error": float(np.quantile(check_errors, 0.9)),
            "device_profile_check_median_error": float(np.median(before)),
            "duration_s": round(time.perf_counter() - started, 1)}
        log(f"{spec.name} {dtype} ({impl}): scale {scale:.3f}, step overhead {overhead / MILLI:.2f} ms; untimed points: "
            f"median error {np.median(check_errors):.1%} with the model's terms, {np.median(before):.1%} with the "
            f"device profile alone ({time.perf_counter() - started:.0f} s)")
    return with_model_terms(hw, spec.name, all_terms), report


def print_model_report(report: dict, log=print) -> None:
    for dtype, r in report["dtypes"].items():
        log(f"{report['model']} {dtype}: batch context q   measured ms   device profile ms   with model terms ms")
        for row in r["rows"]:
            log(f"  {'timed' if row['timed'] else 'check'} {row['batch']:>5} {row['context_tokens']:>7} "
                f"{row['new_tokens']:>2} {row['measured_s'] / MILLI:12.2f} {row['device_profile_s'] / MILLI:18.2f} "
                f"{row['with_model_terms_s'] / MILLI:20.2f}")


def measure_model_family(hw, base, source: str, device: Device, dtype: str, timer: Timer, tiny: bool = False,
                         impl: str | None = None) -> list[dict]:
    """`validate --family model --model SOURCE`: the model's check points (the ones `calibrate --model` did not
    time) measured and priced by the profile, with its terms when it has them (rows of `external_validate`)."""
    from ...scenario.builder import build_scenario
    from ...step import get_workload_step

    config_path, spec = resolve_source(source)
    terms = ((hw.measured.provenance.model_terms or {}).get(spec.name) or {}).get(dtype)
    if impl is None:
        impl = terms.implementation if terms else ("hf" if config_path is not None else "reference")
    points = TINY_CHECK if tiny else CHECK_POINTS
    _check_fits(spec, dtype, points)
    steps = ModelSteps(config_path, spec, impl, dtype, device)
    rows = []
    for batch, context, q in points:
        fn, reset = steps.step(batch, context, q)
        with torch.inference_mode():
            t = timer.time(fn, min_calls=3, min_time_s=0.0 if tiny else 0.1, max_calls=30, warmup_s=0.0,
                           warmup_calls=1, before=reset)
        options = dict(weight_dtype=dtype, kv_dtype=dtype, activation_dtype=dtype, speculative=False,
                       allow_long_context=True)
        sc = build_scenario(hw, spec, batch, context, **options)
        step = get_workload_step(sc.hardware, spec, sc.workload, q, sc.timing, context, batch)
        roof = build_scenario(base, spec, batch, context, **options)
        roofline = get_workload_step(roof.hardware, spec, roof.workload, q, roof.timing, context, batch)
        rows.append({"kind": "decode" if q == 1 else "verify", "model": spec.name, "family": "model",
                     "batch": batch, "context_tokens": context, "new_tokens": q, "measured_s": t.estimate_s,
                     "measured_spread": t.spread, "measured_median_s": t.median_s,
                     "predicted_s": float(step.step_time_s), "roofline_s": float(roofline.roofline_step_time_s),
                     "predicted_low_s": None if step.sigmas is None else float(step.step_time_s_low),
                     "predicted_high_s": None if step.sigmas is None else float(step.step_time_s_high),
                     "model_terms": terms is not None})
    return rows
