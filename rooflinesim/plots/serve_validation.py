"""Measured serving loop vs the serving simulator, from a `rooflinesim validate --serve` report."""

from __future__ import annotations


import numpy as np

from ..errors import InputError
from ..units import MILLI
from .common import COLORS, _new_figure, read_report, describe_machine_speed

REQUEST_KEYS = ("measured_ttft_s", "simulated_ttft_s", "measured_tpot_s", "simulated_tpot_s")


def load_serve_validation_report(report) -> dict:
    """A serve validation report (path or parsed dict), checked for the keys the chart needs.

    Schema (written by `rooflinesim validate --serve`): model, draft, device, dtype, requests, offered_rate_per_s,
    acceptance {expected_tokens, k}, goals {p50, p90}, meets_goal, policies: [{policy, comparison:
    {ttft_p50|ttft_p90|tpot_p50|tpot_p90: {measured_s, simulated_s, error, goal, meets_goal}}, measured, simulated,
    step_model, batch_share {measured, simulated}, requests {measured_ttft_s, simulated_ttft_s, measured_tpot_s,
    simulated_tpot_s}}].
    """
    data, where = read_report(report, "serve validation report")
    policies = data.get("policies")
    if not isinstance(policies, list) or not policies:
        raise InputError(f"{where}: needs a non-empty 'policies' list")
    for i, row in enumerate(policies):
        if not isinstance(row, dict) or not isinstance(row.get("comparison"), dict) or \
                not isinstance(row.get("requests"), dict) or not isinstance(row.get("batch_share"), dict):
            raise InputError(f"{where}: policies[{i}] needs 'comparison', 'requests' and 'batch_share' objects")
        missing = [key for key in REQUEST_KEYS if not isinstance(row["requests"].get(key), list)]
        if missing:
            raise InputError(f"{where}: policies[{i}].requests lacks {', '.join(missing)}")
    return data


def _ecdf(values) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(np.asarray([x for x in values if x is not None], dtype=float))
    v = v[np.isfinite(v)]
    return v, np.arange(1, v.size + 1) / max(v.size, 1)


def get_serve_validation_data(report) -> dict:
    """Per policy: the measured and simulated ECDFs of TTFT and TPOT (ms), the p50 / p90 errors, and the share of busy
    time at each running batch, measured and simulated."""
    data = load_serve_validation_report(report)
    out = []
    for row in data["policies"]:
        r = row["requests"]
        curves = {}
        for side in ("measured", "simulated"):
            for metric in ("ttft", "tpot"):
                values, share = _ecdf(r[f"{side}_{metric}_s"])
                curves[f"{side}_{metric}"] = (values / MILLI, share)  # ms, share of requests
        errors = {name: c.get("error") for name, c in row["comparison"].items()}
        interval = row.get("interval") or {}  # the step model's 90 % interval on each simulated percentile (ms)
        intervals = {name: (c["low_s"] / MILLI, c["high_s"] / MILLI) for name, c in interval.items()
                     if isinstance(c, dict) and "low_s" in c}
        out.append({"policy": row["policy"], "curves": curves, "errors": errors, "intervals": intervals,
                    "batch_share": row["batch_share"], "contended": row.get("cpu_contended_share")})
    rate, load = data.get("offered_rate_per_s"), data.get("offered_load")
    rate = f"{rate:.3g}" if isinstance(rate, (int, float)) else "?"
    load = f" (load {load:.2f} of off's simulated capacity)" if isinstance(load, (int, float)) else ""
    return {"policies": out, "title": (
        f"Serving loop vs simulator: {data.get('model', '?')} + {data.get('draft', '?')} on {data.get('device', '?')} "
        f"({data.get('dtype', '?')}), {data.get('requests', '?')} requests at {rate}/s{load}"),
        "meets_goal": data.get("meets_goal"), "goals": data.get("goals", {}),
        "machine_speed": describe_machine_speed(data)}


def _fmt(error) -> str:
    return "n/a" if error is None else f"{error:+.0%}"


def plot_serve_validation(report):
    """Three panels: the TTFT and TPOT distributions over requests (ECDF, log scale when they span more than 10x:
    measured solid, simulated dashed, a translucent bar at p50 and p90 for the simulated percentile's 90 % interval
    from the step model; the legend gives the simulator's p50 / p90 errors and how much of a measured run the CPU was
    contended by other processes), and the share of busy time at each running batch."""
    data = get_serve_validation_data(report)
    fig, (ttft, tpot, share) = _new_figure((15.0, 4.8), ncols=3)
    n_pol = len(data["policies"])
    width = 0.8 / (2 * n_pol)
    for i, row in enumerate(data["policies"]):
        color = COLORS[i % len(COLORS)]
        contended = "" if not row["contended"] else f", CPU contended {row['contended']:.0%}"
        for ax, metric in ((ttft, "ttft"), (tpot, "tpot")):
            e50, e90 = row["errors"].get(f"{metric}_p50"), row["errors"].get(f"{metric}_p90")
            x, y = row["curves"][f"measured_{metric}"]
            ax.step(x, y, where="post", color=color, label=f"{row['policy']} measured{contended}")
            x, y = row["curves"][f"simulated_{metric}"]
            ax.step(x, y, where="post", color=color, linestyle="--",
                    label=f"{row['policy']} simulated (p50 {_fmt(e50)}, p90 {_fmt(e90)})"
                    + ("; bars: 90 % interval" if row["intervals"] else ""))
            for p in (0.5, 0.9):  # the simulated percentile's 90 % interval, a little apart per policy
                band = row["intervals"].get(f"{metric}_p{int(p * 100)}")
                if band:
                    y = p + 0.02 * (i - (n_pol - 1) / 2)
                    ax.plot(band, (y, y), color=color, linewidth=4, alpha=0.35, solid_capstyle="butt")
        for j, side in enumerate(("measured", "simulated")):
            values = np.asarray(row["batch_share"][side])
            batches = np.arange(1, values.size + 1)
            share.bar(batches + (2 * i + j - n_pol + 0.5) * width, values, width, color=color,
                      alpha=1.0 if side == "measured" else 0.45, label=f"{row['policy']} {side}")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    for ax, what in ((ttft, "TTFT"), (tpot, "TPOT")):
        ax.set(xlabel=f"{what} (ms)", ylabel="share of requests", title=f"{what} over requests")
        values = np.concatenate([row["curves"][f"{side}_{what.lower()}"][0] for row in data["policies"]
                                 for side in ("measured", "simulated")])
        values = values[values > 0]
        if values.size:  # the axis spans the distributions; an interval reaching past it is cut at the frame
            ax.set_xlim(values.min() / 1.1, values.max() * 1.1)
        if values.size and values.max() / values.min() > 10:  # a wide range (queueing tails): log scale
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
        for p in (0.5, 0.9):
            ax.axhline(p, color="0.6", linewidth=0.8, linestyle=":")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    share.set(xlabel="running requests", ylabel="share of busy time", title="batch the engine ran at")
    share.legend(fontsize=7)
    share.grid(True, axis="y", alpha=0.3)
    goals = data["goals"]
    verdict = "" if data["meets_goal"] is None else (
        f" - goals (p50 {goals.get('p50', 0):.0%}, p90 {goals.get('p90', 0):.0%}) "
        + ("met" if data["meets_goal"] else "not met"))
    fig.suptitle(data["title"] + verdict + (f"\n{data['machine_speed']}" if data["machine_speed"] else ""),
                 fontsize=10)
    return fig


__all__ = ["load_serve_validation_report", "get_serve_validation_data", "plot_serve_validation"]
