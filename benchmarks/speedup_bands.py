"""The error band of a speculative speedup, per engine profile, from the held-out rows of the published
speculation-under-load benchmark.

    python benchmarks/speedup_bands.py           # print the bands and their leave-one-source-out check (~2 min)
    python benchmarks/speedup_bands.py --write   # regenerate rooflinesim/pricing/speedup_error_bands.py

Every priceable held-out row of `benchmarks/published/speculation-under-load.yaml` is priced as
`bench_under_load.py` prices it, once with the row's engine profile and once with `ideal` (bare kernels, each
series' acceptance fitted on bare kernels too), and its error read as predicted - measured speedup (x). An engine's
band is symmetric: +-h, h the 90th percentile of |error| over its rows; a speedup S reads as [S - h, S + h]. An
engine with fewer than MIN_ROWS rows gets the h of every engine-profile row, widened by POOLED_WIDENING, and is
flagged. Fitted rows are left out: their error is zero by construction.

Why symmetric: the sources lean opposite ways (SpecDecode-Bench's rows are priced low, the EAGLE-3 paper's, MagicDec's
and the vLLM blog's high), so a band of the 5th to 95th percentile of the signed error, built without a source, held
only a third of that source's rows. The symmetric band, built the same way, holds about nine in ten
(`get_leave_one_source_out`, printed and written into the generated file).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "rooflinesim" / "pricing" / "speedup_error_bands.py"
MIN_ROWS = 10
POOLED_WIDENING = 1.5
PERCENTILE = 90
#: the files the bands are priced from (besides the code): a change to any of them asks for a regeneration
INPUT_GLOBS = ("benchmarks/published/speculation-under-load.yaml", "benchmarks/published/specdecode-bench-lengths.yaml",
               "engines/*.yaml", "hardware/*.yaml", "models/*.yaml")


def get_inputs_sha256(root: Path = ROOT) -> str:
    """SHA-256 over the input files' paths and bytes, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for pattern in INPUT_GLOBS for p in root.glob(pattern)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _bench_under_load():
    spec = importlib.util.spec_from_file_location("bench_under_load", ROOT / "benchmarks" / "bench_under_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_errors(bench=None) -> list[tuple[str, str, float]]:
    """(engine name, source id, predicted - measured speedup) per held-out row: priced with the row's engine profile,
    and again with 'ideal'."""
    bench = bench or _bench_under_load()
    rows = bench.load_rows(bench.SPEC_TABLE)
    alphas = bench.series_alphas(rows)
    held = [r for r in rows if not r.get("fitted_on") and r["series"] in alphas and not bench.not_priceable_reason(r)]
    out = [(bench.priced_engine(bench._build(r)[0]), r["source_id"],
            bench.predict_speedup(r, alphas[r["series"]]) - r["measured"]) for r in held]
    # the same rows on bare kernels, each series' acceptance fitted on bare kernels too (as bench_under_load's
    # `ideal` figures are)
    bare_alphas = bench.series_alphas([dict(r, engine="ideal") for r in rows])
    out += [("ideal", r["source_id"], bench.predict_speedup(dict(r, engine="ideal"), bare_alphas[r["series"]])
             - r["measured"]) for r in held]
    return out


def get_hardware_by_engine(bench=None) -> dict[str, tuple[str, ...]]:
    """{engine name: the shipped hardware names its held-out rows ran on}, 'ideal' holding every row's."""
    from rooflinesim.specs.registry import get_short_name, load_hardware

    bench = bench or _bench_under_load()
    rows = bench.load_rows(bench.SPEC_TABLE)
    alphas = bench.series_alphas(rows)
    held = [r for r in rows if not r.get("fitted_on") and r["series"] in alphas and not bench.not_priceable_reason(r)]
    out: dict[str, set] = defaultdict(set)
    for r in held:
        hw = get_short_name(load_hardware(r["hardware"]))
        out[bench.priced_engine(bench._build(r)[0])].add(hw)
        out["ideal"].add(hw)
    return {engine: tuple(sorted(names)) for engine, names in sorted(out.items())}


def _half_width(errors) -> float:
    return float(np.percentile(np.abs(np.asarray(errors, dtype=float)), PERCENTILE))


def get_bands(errors: list[tuple[str, str, float]]) -> tuple[dict, tuple]:
    """({engine: (h, rows)}, (pooled h, rows)); the pool is every engine-profile row (not `ideal`'s repricing)."""
    by_engine = defaultdict(list)
    for engine, _, e in errors:
        by_engine[engine].append(e)
    bands = {name: (_half_width(e), len(e)) for name, e in sorted(by_engine.items())}
    every = [e for engine, _, e in errors if engine != "ideal"]
    return bands, (_half_width(every), len(every))


def get_leave_one_source_out(errors: list[tuple[str, str, float]]) -> list[dict]:
    """Per source: how many of its engine-profile rows lie inside the band built as above from every other source:
    how the band does on a source it never saw."""
    rows = [(engine, source, e) for engine, source, e in errors if engine != "ideal"]
    out = []
    for source in sorted({s for _, s, _ in rows}):
        others = [(engine, e) for engine, s, e in rows if s != source]
        pooled = _half_width([e for _, e in others]) * POOLED_WIDENING
        inside = []
        for engine, s, e in rows:
            if s == source:
                own = [x for g, x in others if g == engine]
                inside.append(abs(e) <= (_half_width(own) if len(own) >= MIN_ROWS else pooled))
        out.append({"source": source, "rows": len(inside), "inside": int(sum(inside))})
    return out


def render(bands: dict, pooled: tuple, checks: list[dict], hardware: dict) -> str:
    inside, rows = sum(c["inside"] for c in checks), sum(c["rows"] for c in checks)
    lines = ['"""Generated by benchmarks/speedup_bands.py (do not edit): per engine profile, the 90th percentile of',
             "|predicted - measured speedup| (x) over the held-out rows of",
             "benchmarks/published/speculation-under-load.yaml priced with that profile, and the row count; POOLED is",
             'the same over every engine-profile row. See pricing/speedup_band.py."""', "", "BANDS = {"]
    lines += [f"    {name!r}: ({h:.4f}, {n})," for name, (h, n) in bands.items()]
    lines += ["}", f"POOLED = ({pooled[0]:.4f}, {pooled[1]})", f"MIN_ROWS = {MIN_ROWS}",
              f"POOLED_WIDENING = {POOLED_WIDENING}",
              "#: the hardware each profile's rows ran on (a band read on other hardware says so)",
              "HARDWARE = {"] + [f"    {name!r}: {names!r}," for name, names in hardware.items()] + ["}",
              "#: rows of each source inside the band built without that source, summed over the sources",
              f"LEAVE_ONE_SOURCE_OUT = ({inside}, {rows})",
              "#: SHA-256 of the benchmark, engine, hardware and model files the bands were priced from",
              f"INPUTS_SHA256 = {get_inputs_sha256()!r}", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"regenerate {OUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    errors = get_errors()
    bands, pooled = get_bands(errors)
    for name, (h, n) in bands.items():
        flag = "" if n >= MIN_ROWS else f"  (fewer than {MIN_ROWS} rows: the pooled band x{POOLED_WIDENING:g} stands in)"
        print(f"{name:10s} {n:4d} rows: |predicted - measured| <= {h:.3f}x for {PERCENTILE} % of them{flag}")
    print(f"{'pooled':10s} {pooled[1]:4d} rows: {pooled[0]:.3f}x")
    print("leave one source out (its rows against the bands of the other sources):")
    checks = get_leave_one_source_out(errors)
    for c in checks:
        print(f"  {c['source']:22s} {c['inside']:3d} of {c['rows']:3d} rows inside "
              f"({100 * c['inside'] / c['rows']:.0f} %)")
    inside, rows = sum(c["inside"] for c in checks), sum(c["rows"] for c in checks)
    print(f"  all sources: {inside} of {rows} ({100 * inside / rows:.0f} %; a 90 % band should hold about 90 %)")
    if args.write:
        OUT.write_text(render(bands, pooled, checks, get_hardware_by_engine()))
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
