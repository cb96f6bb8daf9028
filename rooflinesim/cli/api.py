"""explore's JSON API: a request is the command line, answered by the code behind `rooflinesim CMD --json`.

`GET /api/predict?hw=a100&batch=8&ctx=32k` becomes `predict --hw=a100 --batch=8 --ctx=32k --json`: each query
parameter is the long flag of the same name without its dashes, checked against the command's own argparse parser
(so a flag added to the command is in the API at once), parsed by that parser and priced by the same function that
prints `--json`. The body is byte for byte what the command prints on stdout; what it prints on stderr (warnings)
travels in the `X-Rooflinesim-Stderr` header as a JSON list of lines. A bad request is HTTP 400 with the line the
command line prints (`{"error": "rooflinesim: error: ..."}`).

This module lives in the cli layer (it composes the commands) and is handed to `explore.server` by `cmd_explore`:
the server never imports the command line, so imports still flow one way (see tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import InputError
from .pricing import CommandOutput, get_predict_output, get_serve_output, get_sweep_output, get_sweep_result
from .specs import get_list_output

#: flags that write files, pick the output form, fan out to other machines or read a request trace: the API answers
#: in JSON, in this process, within a bounded time
NOT_IN_THE_API = {
    "output": "writes a file", "format": "sets the -o file's format", "json": "is implied",
    "help": "prints help text", "dask": "sends work to another machine", "workers": "starts processes",
    "trace": "replays a trace file of unbounded size",
}
#: /api/serve runs in the server's own thread: requests x rates x policies x output tokens (the longest output) must
#: stay below this (the default serve run is 1000 x 1 x 2 x 128 = 256k; 4M simulate in seconds on a 2-core VM)
MAX_SERVE_OUTPUT_TOKENS = 4_000_000
TRUE, FALSE = {"", "1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def get_sweep_map_output(args) -> CommandOutput:
    """The speedup map of the sweep flags: SweepResult's own best k, best speedup and break-even (the numbers behind
    `rooflinesim plot speedup` and `sweep --json`), indexed [batch][context][alpha]; null where nothing fits."""
    import numpy as np

    from .pricing import get_warning_lines

    result = get_sweep_result(args)

    def listed(values):
        values = np.asarray(values, dtype=float)
        return np.where(np.isfinite(values), values, None).tolist()

    spec = result.k > 0
    out = {
        "hardware": result.hardware, "model": result.model, "draft": result.draft,
        "batch": result.batch.tolist(), "context_tokens": result.context_tokens.tolist(), "k": result.k.tolist(),
        "alpha": result.alpha.tolist(), "best_k": result.best_k.tolist(), "best_speedup": listed(result.best_speedup),
        "best_speculative_speedup": listed(result.best_speculative_speedup),
        "speculation_fits_in_memory": result.fits_in_memory[:, :, spec].any(axis=2).tolist() if spec.any() else None,
        "break_even": result.get_break_even_table(), "schedules": result.get_engine_schedules(),
        "warnings": list(result.warnings),
    }
    return json.dumps(out, indent=1, allow_nan=False), get_warning_lines(result.warnings)


def _check_serve_size(args) -> None:
    from ..serve import parse_policies
    from ..serve.rates import parse_rates
    from ..scenario.inputs import DEFAULT_OUTPUT_TOKENS, DEFAULT_SERVE_REQUESTS
    from ..serve.workload import LengthDistribution

    if args.emit_config:
        return
    rates = len(parse_rates(args.rate)) if args.rate else 1
    policies = len(parse_policies(args.policy))
    output = LengthDistribution.parse(args.output_tokens or DEFAULT_OUTPUT_TOKENS, "--output-tokens").max_tokens
    requests = DEFAULT_SERVE_REQUESTS if args.requests is None else args.requests
    size = requests * rates * policies * output
    if size > MAX_SERVE_OUTPUT_TOKENS:
        raise InputError(f"this serve run simulates up to {requests} requests x {rates} rates x {policies} "
                         f"policies x {output} output tokens = {size:,} tokens; explore answers up to "
                         f"{MAX_SERVE_OUTPUT_TOKENS:,} (fewer --requests, rates or policies; or run "
                         f"'rooflinesim serve' in a terminal)")


@dataclass(frozen=True)
class Endpoint:
    argv: tuple[str, ...]  # the command line before the request's flags
    run: Callable[[argparse.Namespace], CommandOutput]
    check: Callable[[argparse.Namespace], None] | None = None


ENDPOINTS = {
    "predict": Endpoint(("predict", "--json"), get_predict_output),
    "sweep": Endpoint(("sweep", "--json"), get_sweep_output),
    "sweep/map": Endpoint(("sweep",), get_sweep_map_output),
    "serve": Endpoint(("serve", "--json"), get_serve_output, _check_serve_size),
    "list/hardware": Endpoint(("list", "hardware", "--json"), get_list_output),
    "list/models": Endpoint(("list", "models", "--json"), get_list_output),
    "list/acceptance": Endpoint(("list", "acceptance", "--json"), get_list_output),
}


@dataclass(frozen=True)
class ApiAnswer:
    status: int
    body: str
    media_type: str = "application/json"
    stderr_lines: list[str] = field(default_factory=list)


def get_page_defaults() -> dict[str, str]:
    """The scenario's defaults the explore page shows and starts from, by parameter name (the page writes none)."""
    from ..scenario.groups import get_default
    from ..scenario.inputs import (
        DEFAULT_ALPHA, DEFAULT_BATCH, DEFAULT_CONTEXT_TOKENS, DEFAULT_DRAFTER, DEFAULT_HARDWARE, DEFAULT_K_MAX,
        DEFAULT_MODEL, DEFAULT_WEIGHT_DTYPE,
    )
    from ..units import format_count

    return {"hw": DEFAULT_HARDWARE, "model": DEFAULT_MODEL, "batch": str(DEFAULT_BATCH),
            "ctx": format_count(DEFAULT_CONTEXT_TOKENS), "alpha": f"{DEFAULT_ALPHA:g}", "k": f"0..{DEFAULT_K_MAX}",
            "weight-dtype": DEFAULT_WEIGHT_DTYPE, "attention": str(get_default("attention")),
            "tp": str(get_default("tp")), "drafter": DEFAULT_DRAFTER}


def _error(message: str) -> ApiAnswer:
    return ApiAnswer(400, json.dumps({"error": f"rooflinesim: error: {message}"}) + "\n")


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


class CommandApi:
    """Answers `GET /api/<endpoint>?<params>` with the command line's parser and commands.

    parser_factory: a fresh command-line parser whose usage errors raise InputError (one per request: argparse
    parsers are not shared between threads); calibration: the profile applied wherever the request names none.
    """

    def __init__(self, parser_factory: Callable[[], argparse.ArgumentParser], calibration: str | None = None):
        self.parser_factory = parser_factory
        self.calibration = calibration

    def get_parameters(self, endpoint: str) -> dict[str, dict]:
        """The parameters an endpoint takes, from the command's parser: {name: {switch, choices, default, help}}
        (the page builds its choice lists from these, so a choice or flag added to a command reaches it)."""
        command = _command_parser(self.parser_factory(), ENDPOINTS[endpoint].argv[0])
        out = {}
        for action in command._actions:
            names = [s[2:] for s in action.option_strings if s.startswith("--")]
            if not names or names[0] in NOT_IN_THE_API or action.dest == "help":
                continue
            out[names[0]] = {"switch": action.nargs == 0, "choices": None if action.choices is None else
                             [str(c) for c in action.choices], "default": action.default, "help": action.help}
        return out

    def get_argv(self, endpoint: str, params: Sequence[tuple[str, str]]) -> list[str]:
        """The command line of a request; InputError (the CLI's wording) for an unknown or unusable parameter."""
        spec = ENDPOINTS[endpoint]
        command = _command_parser(self.parser_factory(), spec.argv[0])
        options = {s[2:]: a for a in command._actions for s in a.option_strings if s.startswith("--")}
        see = f"see 'rooflinesim {spec.argv[0]} --help'"
        argv, seen = list(spec.argv), set()
        for name, value in params:
            if name in seen:
                raise InputError(f"parameter {name} given twice")
            seen.add(name)
            if name in NOT_IN_THE_API and name in options:
                raise InputError(f"--{name} is not available in explore's API: it {NOT_IN_THE_API[name]}")
            action = options.get(name)
            if action is None:
                from difflib import get_close_matches

                close = get_close_matches(name, [o for o in options if o not in NOT_IN_THE_API], n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise InputError(f"unrecognized arguments: --{name}={value} ({see}){hint}")
            if action.nargs == 0:  # a switch: sampling=1 turns it on, sampling=0 leaves it off
                if value.strip().lower() not in TRUE | FALSE:
                    raise InputError(f"--{name} is a switch: give {name}=1 or {name}=0, got {value!r} ({see})")
                if value.strip().lower() in TRUE:
                    argv.append(f"--{name}")
            elif value != "":  # an empty field is the command's default
                argv.append(f"--{name}={value}")
        if self.calibration and "calibration" in options and "calibration" not in seen:
            argv.append(f"--calibration={self.calibration}")
        return argv

    def answer(self, endpoint: str, params: Sequence[tuple[str, str]]) -> ApiAnswer:
        if endpoint == "config":
            if params:
                return _error("/api/config takes no parameters")
            config = {"calibration": self.calibration, "endpoints": sorted(ENDPOINTS),
                      "parameters": {name: self.get_parameters(name) for name in ENDPOINTS},
                      "defaults": get_page_defaults()}
            return ApiAnswer(200, json.dumps(config, indent=1, default=str) + "\n")
        if endpoint not in ENDPOINTS:
            from difflib import get_close_matches

            close = get_close_matches(endpoint, list(ENDPOINTS), n=1)
            return ApiAnswer(404, json.dumps({"error": f"no API endpoint /api/{endpoint}" +
                                              (f"; did you mean /api/{close[0]}?" if close else "")}) + "\n")
        from ..specs.registry import SpecError
        from ..units import UnitError

        spec = ENDPOINTS[endpoint]
        try:
            args = self.parser_factory().parse_args(self.get_argv(endpoint, params))
            if getattr(args, "workers", None) is None and hasattr(args, "workers"):
                args.workers = 1  # no process pool forked from the server's threads
            if spec.check is not None:
                spec.check(args)
            text, stderr_lines = spec.run(args)
        except (InputError, SpecError, UnitError) as exc:
            return _error(str(exc))
        json_out = getattr(args, "emit_config", None) is None  # every engine config is a launch line or YAML
        return ApiAnswer(200, text + "\n", "application/json" if json_out else "text/plain", stderr_lines)
