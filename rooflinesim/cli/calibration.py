"""The torch-bound commands: calibrate (and --merge) and validate; every check runs before any measuring."""

from __future__ import annotations

import sys

from ..errors import InputError
from ..units import GIGA, MICRO


def _import_torch_or_fail():
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # checked without importing it: torch stays in calibrate/
        raise InputError("calibrate/validate need torch: pip install 'rooflinesim[calibrate]' "
                         "(install the CPU build of torch first to avoid the multi-GB CUDA wheel)")


def _check_threads(threads) -> None:
    if threads is not None and not 1 <= threads <= 1024:  # calibrate.timers.MAX_THREADS (torch not imported yet)
        raise InputError(f"--threads must be a positive integer up to 1024, got {threads}")


def _process_age_s() -> float:
    """Seconds since this process started (the torch import counts against a calibration budget); 0 if unknown."""
    import os

    try:
        with open("/proc/self/stat") as f:  # closed at once: an unclosed file warns on every calibrate run
            start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        return max(uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


def cmd_merge(args) -> int:
    from ..calibrate.fitting.merge import merge_profile_files

    if not args.out:
        raise InputError("--merge needs --out PATH for the combined profile")
    if args.shapes_of is not None:
        raise InputError("--shapes-of belongs to a measuring run; --merge pools the tables the profiles already have")
    if len(args.merge) < 2:
        raise InputError("--merge needs at least two profiles, e.g. --merge a.yaml b.yaml --out c.yaml")
    spec = merge_profile_files(args.merge, args.out)
    prov = spec.measured.provenance
    print(f"wrote {args.out} ({prov.device_name}, {', '.join(prov.dtypes)}, {len(args.merge)} runs merged)")
    return 0


def format_layer_overheads(layer_s: float, in_model_s: float) -> str:
    """The fitted per-layer overheads as printed after calibrating: only the ones the fit kept (a cost fitted to 0
    is left out, never printed as "0 us"), to 2 significant figures; '' when both are 0."""
    parts = [f"{value / MICRO:.2g} us{where}" for value, where in ((layer_s, ""), (in_model_s, " in a model's layers"))
             if value > 0]
    return f"per-layer overhead {' + '.join(parts)}, " if parts else ""


def cmd_calibrate(args) -> int:
    import shlex
    from pathlib import Path

    from ..fileio import check_output_path
    from ..units import normalize_dtype

    if args.merge:
        return cmd_merge(args)
    if getattr(args, "model", None):
        return cmd_calibrate_model(args)
    for name in ("profile", "impl"):
        if getattr(args, name, None) is not None:
            raise InputError(f"--{name} belongs to 'calibrate --model PATH_OR_NAME'")
    if args.budget is not None and not args.budget > 0:
        raise InputError(f"--budget must be a positive number of seconds, got {args.budget}")
    _import_torch_or_fail()
    _check_threads(args.threads)
    dtypes = None if args.dtype is None else tuple(dict.fromkeys(normalize_dtype(d) for d in args.dtype.split(",")
                                                                  if d.strip()))
    if dtypes == ():
        raise InputError("--dtype needs at least one dtype, e.g. --dtype fp32,bf16")
    from ..specs.registry import load_model

    shapes_of = tuple(load_model(name.strip()) for name in (args.shapes_of or "").split(",") if name.strip())
    if args.shapes_of is not None and not shapes_of:
        raise InputError("--shapes-of needs at least one model, e.g. --shapes-of tiny-llama-123m")
    if args.out:  # checked before minutes of measuring, not after
        check_output_path(args.out, "profile (--out)", (".yaml", ".yml"), create_parent=True)
    from ..calibrate.measure.bench import run_calibration
    from ..specs.profiles import write_profile
    from ..calibrate.measure.timers import get_default_calibration_dtypes, select_device

    device = select_device(args.device, args.threads)
    dtypes = dtypes or get_default_calibration_dtypes(device)
    out = Path(args.out) if args.out else Path("calibrate") / device.slug / f"{device.slug}.yaml"  # calibrate/README.md
    check_output_path(out, "profile (--out)", (".yaml", ".yml"), create_parent=True)
    command = "rooflinesim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["calibrate"] else (
        "rooflinesim calibrate")
    spec = run_calibration(device, dtypes, args.quick, command, seed=args.seed, progress=not args.no_progress,
                           budget_s=args.budget, spent_s=_process_age_s(), shapes_of=shapes_of)
    write_profile(spec, out)
    prov = spec.measured.provenance
    print(f"wrote {out} ({prov.device_name}, {', '.join(prov.dtypes)}, {prov.duration_s:.1f} s, "
          f"drift {prov.drift:.1%}{' FLAGGED: re-run on a quieter machine' if prov.drift_flagged else ''})")
    for dtype, prof in spec.measured.dtypes.items():
        print(f"  {dtype}: GEMV {prof.gemv_bandwidth_bytes_per_s / GIGA:.1f} GB/s, copy "
              f"{prof.copy_bandwidth_bytes_per_s / GIGA:.1f} GB/s, GEMM peak {prof.peak_flops_per_s / GIGA:.0f} GFLOP/s, "
              f"{format_layer_overheads(prof.layer_overhead_s, prof.in_model_layer_overhead_s)}in-model scale "
              f"{prof.in_model_scale:.2f}" + (f"; cache reuse {prof.cache_reuse.describe()}" if prof.cache_reuse else ""))
    for line in get_fit_warnings(spec):
        print(line, file=sys.stderr)
    if "re-run in a quiet window" in prov.notes:
        print("warning: the CPU was contended by other processes during the run (see the profile's notes); "
              "numbers from a quiet window are more reproducible", file=sys.stderr)
    if prov.drift_flagged:
        print(f"warning: the reference measurement drifted by {prov.drift:.0%} during the run", file=sys.stderr)
    return 0


def get_fit_warnings(spec) -> list[str]:
    """The warnings of a measured profile's terms that a prior, not the measurements, set (one line each)."""
    contended = "re-run in a quiet window" in spec.measured.provenance.notes
    lines = []
    for dtype, prof in spec.measured.dtypes.items():
        if prof.residuals.get("decoder_fit_scale_prior") == 1.0:
            lines.append(f"warning: {dtype}: no mid-size decoder streamed its weights from memory; the in-model scale "
                         "is kept at 1")
        if prof.residuals.get("linear_peak_at_probe_bound") == 1.0:
            # on a quiet 2-core Xeon VM every --quick run fitted 144-186 GFLOP/s against a probe's ~370 and a full
            # run's 311-359: the quick plan's largest GEMMs (M <= 256) do not reach the peak, no neighbour needed
            why = ("the compute-bound points were measured under contention" if contended else
                   "this plan's GEMMs ran well below the probe's rate; a full calibration (--budget) times larger ones")
            lines.append(f"warning: {dtype}: the fitted GEMM peak is at the limit of the device probe's (x2): {why}")
    return lines


def cmd_calibrate_model(args) -> int:
    """`calibrate --model PATH_OR_NAME`: the model's own terms on top of a device profile (--profile), written to
    --out (default: the profile itself)."""
    from pathlib import Path

    from ..fileio import check_output_path
    from ..specs.profiles import load_profile
    from ..units import normalize_dtype

    for name in ("shapes_of", "quick"):
        if getattr(args, name, None):
            raise InputError(f"--{name.replace('_', '-')} belongs to a device calibration, not to --model")
    _import_torch_or_fail()
    _check_threads(args.threads)
    from ..calibrate.external.model_terms import print_model_report, run_model_calibration
    from ..specs.profiles import write_profile
    from ..calibrate.measure.timers import select_device

    profile_path = args.profile
    if profile_path is None:
        slug = select_device(args.device, args.threads).slug
        profile_path = str(Path("calibrate") / slug / f"{slug}.yaml")
        if not Path(profile_path).is_file():
            raise InputError(f"--model extends this device's profile: no --profile given and none at {profile_path} "
                             "(run 'rooflinesim calibrate' first or give --profile)")
    hw = load_profile(profile_path)
    out = Path(args.out or profile_path)
    check_output_path(out, "profile (--out)", (".yaml", ".yml"), create_parent=True)
    asked = list(hw.measured.dtypes) if args.dtype is None else [normalize_dtype(d) for d in args.dtype.split(",")
                                                                  if d.strip()]
    dtypes = [d for d in asked if d in hw.measured.dtypes]
    if not dtypes:
        raise InputError(f"{profile_path} measured {', '.join(hw.measured.dtypes)}; --dtype asked for "
                         f"{', '.join(asked)}")
    threads = args.threads or hw.measured.provenance.threads
    device = select_device(args.device, threads if hw.measured.provenance.device_kind == "cpu" else None)
    if hw.measured.provenance.device_kind != device.kind:
        raise InputError(f"{profile_path} was measured on a {hw.measured.provenance.device_kind} device, not here")
    log = (lambda *a: None) if args.no_progress else print
    fitted, report = run_model_calibration(hw, args.model, device, dtypes, impl=args.impl, seed=args.seed, log=log)
    print_model_report(report)
    write_profile(fitted, out)
    print(f"wrote {out} (model terms of {report['model']}: {', '.join(report['dtypes'])}, {report['implementation']})")
    return 0


#: validate builds its hold-out decoders in host memory; refuse models whose estimate exceeds this share of it.
VALIDATE_MEMORY_SHARE = 0.5


def _check_validation_fits(model: str, draft: str, dtypes) -> None:
    """Refuse up front, with the estimate, a hold-out pair that would not fit in this machine's memory (weights of
    both models + KV caches for the largest batch x context validate times, in the widest dtype), and a model the
    Llama-style torch decoder of `calibrate/reference/model.py` cannot build as it is."""
    import os

    from ..specs.registry import load_model
    from ..units import get_dtype_bytes

    target_spec, draft_spec = load_model(model), load_model(draft)
    for spec in (target_spec, draft_spec):  # the decoder would be built dense and compared with this model's price
        differs = [what for what, present in (
            ("mixture-of-experts MLPs", spec.moe is not None), ("latent attention (MLA)", spec.mla is not None),
            ("a sliding attention window", spec.sliding_window_tokens is not None),
            ("LayerNorm", spec.norm != "rmsnorm"), ("a non-gated MLP", not spec.gated_mlp)) if present]
        if differs:
            raise InputError(f"validate times a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU); {spec.name} has "
                             f"{' and '.join(differs)}, so the times would not be its own: validate a dense "
                             "Llama-style model")
    widest = max(get_dtype_bytes(d) for d in dtypes)
    positions = 32 * (2048 + 128)  # the full grid's largest batch x (context + the loop's growth)
    need = sum(m.params * widest + m.get_kv_bytes_per_token("fp32") * widest / 4 * positions
               for m in (target_spec, draft_spec))
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > VALIDATE_MEMORY_SHARE * have:
        raise InputError(
            f"validating {target_spec.name} + {draft_spec.name} needs about {need / GIGA:.1f} GB of host memory "
            f"(weights + KV caches in {max(dtypes, key=get_dtype_bytes)}); this machine has {have / GIGA:.1f} GB: "
            "validate a smaller hold-out model")


def _check_profile_is_hold_out(profile_path, profile, model: str, draft: str, seed: int) -> None:
    """`validate` measures how a profile's tables transfer to weight shapes it never timed: refuse a profile that
    timed a shape of the models it would validate (`calibrate --shapes-of`), before any measuring."""
    from ..calibrate.fitting.holdout import make_hold_out_family
    from ..calibrate.fitting.plan import get_profile_hold_out_clash
    from ..specs.registry import load_model

    clash = get_profile_hold_out_clash(profile, [load_model(model), load_model(draft), *make_hold_out_family(seed)])
    if clash:
        shapes_of = profile.measured.provenance.shapes_of
        shapes = ", ".join(f"{k} x {n}" for k, n in clash)
        raise InputError(
            f"{profile_path} has tables for weight shapes of the validation models ({shapes}"
            + (f"; calibrated with --shapes-of {','.join(shapes_of)}" if shapes_of else "")
            + "): validate measures hold-out error, so it needs a profile calibrated without them. "
              "'validate --serve' accepts this profile")


def cmd_validate(args) -> int:
    from pathlib import Path

    from ..fileio import check_output_dir
    from ..specs.profiles import load_profile
    from ..units import normalize_dtype

    _import_torch_or_fail()
    _check_threads(args.threads)
    if args.out_dir is not None:
        check_output_dir(args.out_dir, "--out-dir")  # before anything is loaded
    from ..calibrate.measure.timers import select_device
    from ..calibrate.validators.validate import combine_reports, print_report, run_validation, write_report

    profile_path = args.profile
    if profile_path is None:
        device = select_device(args.device, args.threads)
        profile_path = str(Path("calibrate") / device.slug / f"{device.slug}.yaml")
        if not Path(profile_path).exists():
            raise InputError(f"no --profile given and no profile of this device at {profile_path}: run 'rooflinesim "
                             "calibrate' first or give --profile")
    profile = load_profile(profile_path)
    # the reports go next to their profile unless --out-dir says otherwise; checked before any measuring
    out_dir = check_output_dir(args.out_dir if args.out_dir is not None else Path(profile_path).parent, "--out-dir")
    args.model = get_validate_model(args, profile)
    for flag in ("tiny", "remeasure"):
        if getattr(args, flag, False) and (args.serve or not getattr(args, "family", None)):
            raise InputError(f"--{flag} belongs to 'validate --family'")
    if args.serve:
        return cmd_validate_serve(args, profile_path, profile, out_dir)
    if getattr(args, "family", None):
        return cmd_validate_family(args, profile_path, profile, out_dir)
    for name in ("load", "rate", "requests", "k"):
        if getattr(args, name, None) is not None:
            raise InputError(f"--{name} belongs to 'validate --serve'")
    _check_profile_is_hold_out(profile_path, profile, args.model, args.draft, args.seed)
    dtypes = [normalize_dtype(args.dtype)] if args.dtype else list(profile.measured.dtypes)
    _check_validation_fits(args.model, args.draft, dtypes)
    threads = args.threads or profile.measured.provenance.threads
    device = select_device(args.device, threads if profile.measured.provenance.device_kind == "cpu" else None)
    reports = []
    for dtype in dtypes:
        report = run_validation(profile_path, device, dtype, quick=args.quick, target=args.model, draft=args.draft,
                                seed=args.seed, progress=not args.no_progress)
        print_report(report)
        reports.append(report)
    json_path = write_report(combine_reports(reports), out_dir, f"{profile.measured.profile_name}-validation")
    written = [json_path]
    if not args.no_plot:  # the chart is composed from the written report
        from ..plots import plot_validation, save_chart

        save_chart(plot_validation(json_path), json_path.with_suffix(".png"))
        written.append(json_path.with_suffix(".png"))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_validate_serve(args, profile_path, profile, out_dir) -> int:
    """`validate --serve`: the measured serving loop against the simulator; JSON + PNG report in --out-dir."""
    from dataclasses import replace

    from ..fileio import write_text_atomic
    from ..units import normalize_dtype

    from ..calibrate.validators.serve_validate import ServeValidationSettings, print_serve_report, run_serve_validation
    from ..calibrate.measure.timers import select_device

    measured_dtypes = list(profile.measured.dtypes)
    dtype = normalize_dtype(args.dtype) if args.dtype else ("fp32" if "fp32" in measured_dtypes else measured_dtypes[0])
    settings = ServeValidationSettings(dtype=dtype, seed=args.seed)
    if args.rate is not None and args.load is not None:
        raise InputError("give --rate (requests per second) or --load (a share of the capacity), not both")
    for name, field in (("load", "load"), ("rate", "rate_per_s"), ("requests", "requests"), ("k", "k")):
        if getattr(args, name) is not None:
            settings = replace(settings, **{field: getattr(args, name)})
    settings.check()
    _check_validation_fits(args.model, args.draft, [dtype])
    threads = args.threads or profile.measured.provenance.threads
    device = select_device(args.device, threads if profile.measured.provenance.device_kind == "cpu" else None)
    report = run_serve_validation(profile_path, device, settings, args.model, args.draft,
                                  log=(lambda *a: None) if args.no_progress else print)
    print_serve_report(report)
    import json

    json_path = write_text_atomic(out_dir / f"{profile.measured.profile_name}-serve-validation.json",
                                  json.dumps(report, indent=1) + "\n")
    written = [json_path]
    if not args.no_plot:
        from ..plots import plot_serve_validation, save_chart

        save_chart(plot_serve_validation(json_path), json_path.with_suffix(".png"))
        written.append(json_path.with_suffix(".png"))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


#: validate's hold-out target when --model is not given
DEFAULT_VALIDATE_MODEL = "tiny-llama-123m"


def get_validate_model(args, profile) -> str:
    """--model, else for `--family model` the one model whose `calibrate --model` terms the profile carries (their
    recorded source: what was timed), else DEFAULT_VALIDATE_MODEL. Checking a model's terms on another model would
    price it without them."""
    if args.model:
        return args.model
    if getattr(args, "family", None):
        from ..calibrate.external.external_validate import parse_families

        if "model" in parse_families(args.family):
            terms = profile.measured.provenance.model_terms or {}
            if len(terms) > 1:
                raise InputError(f"the profile carries terms of {len(terms)} models ({', '.join(sorted(terms))}): "
                                 "say which to check with --model")
            if terms:
                (by_dtype,) = terms.values()
                return next(iter(by_dtype.values())).source
    return DEFAULT_VALIDATE_MODEL


def cmd_validate_family(args, profile_path, profile, out_dir) -> int:
    """`validate --family hf,gptfast,project`: hold-out implementations written outside the project (JSON report)."""
    from ..units import normalize_dtype

    from ..calibrate.external.external_validate import (
        combine_external_reports, parse_families, print_external_report, run_external_validation,
        write_external_report,
    )
    from ..calibrate.measure.timers import select_device

    families = parse_families(args.family)
    if "hf" in families:
        from ..calibrate.external.hf_holdout import require_transformers

        require_transformers()
    from ..calibrate.external.hf_holdout import get_hf_specs
    from ..calibrate.external.gptfast_model import get_gptfast_specs
    from ..calibrate.fitting.plan import get_profile_hold_out_clash

    specs = [*(get_hf_specs() if "hf" in families else ()), *(get_gptfast_specs() if "gptfast" in families else ())]
    clash = get_profile_hold_out_clash(profile, specs)
    if clash:
        raise InputError(f"{profile_path} has tables for weight shapes of the hold-out models "
                         f"({', '.join(f'{k} x {n}' for k, n in clash)}): validate --family needs a profile "
                         "calibrated without them")
    dtypes = [normalize_dtype(args.dtype)] if args.dtype else list(profile.measured.dtypes)
    threads = args.threads or profile.measured.provenance.threads
    device = select_device(args.device, threads if profile.measured.provenance.device_kind == "cpu" else None)
    reports = []
    for dtype in dtypes:
        report = run_external_validation(profile_path, device, dtype, families, quick=args.quick, seed=args.seed,
                                         progress=not args.no_progress, model_source=args.model,
                                         tiny=getattr(args, "tiny", False),
                                         remeasure=getattr(args, "remeasure", False))
        print_external_report(report)
        reports.append(report)
    path = write_external_report(combine_external_reports(reports), out_dir,
                                 f"{profile.measured.profile_name}-{'-'.join(families)}-validation")
    print(f"wrote {path}")
    return 0
