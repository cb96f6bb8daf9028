"""Command line: argument parsing and exit codes only (the commands live in `arguments`, `pricing`, `specs`, `calibration`).

`explore`'s JSON API (`api`) parses each request with this parser (`build_parser(raising=True)`) and answers with the
functions behind `--json`; the web server (rooflinesim/explore) is handed that API and never imports this package.

Bad input -> one line on stderr and exit code 2, never a traceback. Heavy libraries (torch, matplotlib) are imported
inside the commands that need them, so `rooflinesim predict` stays fast.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings

from ..specs.registry import SpecError
from ..errors import InputError
from ..units import UnitError
from .arguments import (
    add_acceptance_source_arguments, add_deployment_arguments, add_serve_arguments, add_speculation_arguments,
    add_workload_arguments,
)
from ..scenario.inputs import (
    DEFAULT_ALPHA, DEFAULT_BATCH, DEFAULT_CHART_ALPHAS, DEFAULT_CONTEXT_TOKENS, DEFAULT_DRAFTER, DEFAULT_HARDWARE,
    DEFAULT_K_MAX, DEFAULT_MODEL, DEFAULT_SERVE_REQUESTS, DEFAULT_SWEEP_BATCH, DEFAULT_SWEEP_CONTEXT, DRAFTER_KINDS,
)
from ..units import format_count
from .calibration import cmd_calibrate, cmd_validate
from .pricing import PLOT_KINDS, cmd_plot, cmd_predict, cmd_serve, cmd_sweep
from .specs import cmd_list, cmd_show

EXIT_BAD_INPUT = 2
USER_ERRORS = (InputError, SpecError, UnitError)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own code for usage errors)
        message = one_line(message)
        command = " ".join(self.prog.split()[1:])  # "" for the top-level parser
        see = f"rooflinesim {command} --help" if command else "rooflinesim --help"
        self.fail(f"{message} (see '{see}')")

    def fail(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"rooflinesim: error: {message}\n")

    def _get_values(self, action, arg_strings):
        # argparse drops a "--" given as an option's value ("--memory-reserve-gib=--") and hands the option an
        # empty list; refuse it as the missing value it is
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
        return super()._get_values(action, arg_strings)

    def parse_args(self, args=None, namespace=None):
        # argparse reports unknown options from the top-level parser ("see 'rooflinesim --help'"); point to the
        # help of the command they were given to instead
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            see = f"rooflinesim {command} --help" if command else "rooflinesim --help"
            shown = " ".join(x if x.strip() and x.isprintable() else repr(x) for x in extras)
            self.fail(f"unrecognized arguments: {shown} (see '{see}')")
        return parsed


class _RaisingParser(_Parser):
    """explore's API parses a request with the command line's own parser: a usage error raises InputError with the
    line the command line would print (after "rooflinesim: error: ") instead of exiting the server."""

    def fail(self, message: str):
        raise InputError(message)


def build_parser(raising: bool = False) -> argparse.ArgumentParser:
    parser_class = _RaisingParser if raising else _Parser
    parser = parser_class(prog="rooflinesim",
                          description="Roofline and speculative-decoding simulator for LLM inference")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=parser_class)

    p = sub.add_parser("predict", help="step times, roofline and memory fit for one workload")
    add_workload_arguments(p)
    p.add_argument("--batch", default=None, help=f"sequences decoded together (default {DEFAULT_BATCH})")
    p.add_argument("--ctx", default=None, help="tokens already in the KV cache: 4096, 4k, 32K, 128k, 1M (default "
                                               f"{format_count(DEFAULT_CONTEXT_TOKENS)})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_speculation_arguments(p)
    p.add_argument("--k", type=int, default=None,
                   help=f"draft tokens per step (default: the best k over 0..{DEFAULT_K_MAX})")
    p.add_argument("--alpha-per-position", default=None,
                   help="conditional acceptance per draft position, e.g. 0.9,0.85,0.8 (instead of --alpha)")
    p.add_argument("--no-speculation", action="store_true", help="skip the speculative-decoding analysis")
    p.add_argument("--ops", action="store_true", help="also print the decode step's op table")
    p.add_argument("--k-table", action="store_true", help="also print the speedup of every draft length")
    p.set_defaults(handler=cmd_predict)

    p = sub.add_parser("sweep", help="speculative speedup over batch x context x k x alpha, break-even, schedules")
    add_workload_arguments(p)
    add_speculation_arguments(p, alpha_list=True)
    p.add_argument("--batch", default=None, help="batch range: 1..256 (powers of two), or 1,2,8 (default "
                                                 f"{DEFAULT_SWEEP_BATCH})")
    p.add_argument("--ctx", default=None, help="context range: 1k..128k (powers of two) or list (default "
                                               f"{DEFAULT_SWEEP_CONTEXT})")
    p.add_argument("--k", default=None, help=f"draft lengths: 0..8 or 1,2,4 (default 0..{DEFAULT_K_MAX})")
    p.add_argument("--format", choices=["csv", "json"], default=None, help="grid file format (default from -o suffix)")
    p.add_argument("-o", "--output", default=None, help="write the full grid here (.csv or .json)")
    p.add_argument("--json", action="store_true", help="print break-even and schedules as JSON on stdout")
    p.set_defaults(handler=cmd_sweep)

    p = sub.add_parser("serve", help="serving under load: a request-level simulation with speculation policies")
    add_serve_arguments(p)
    p.set_defaults(handler=cmd_serve)

    p = sub.add_parser("plot", help="draw a chart: roofline, speedup map, speedup vs k, step breakdown, validation")
    p.add_argument("kind", choices=list(PLOT_KINDS), help="; ".join(f"{k}: {v}" for k, v in PLOT_KINDS.items()))
    p.add_argument("-o", "--output", required=True, help="image file to write: .png or .svg")
    p.add_argument("--hw", default=None, help=f"hardware name, alias or YAML path (default {DEFAULT_HARDWARE})")
    p.add_argument("--calibration", help="measured profile YAML to apply to --hw (roofline: also draws its ceilings)")
    p.add_argument("--model", default=None, help="model name, YAML path, HF config.json or its folder (default "
                                                 f"{DEFAULT_MODEL})")
    p.add_argument("--draft", default=None, help="draft model (speedup, k; default: the smallest shipped model of "
                                                 "the target's family)")
    p.add_argument("--drafter", default=None, choices=list(DRAFTER_KINDS),
                   help=f"drafter kind (speedup, k, serve; default {DEFAULT_DRAFTER})")
    p.add_argument("--tree", default=None, help="draft tree: steps,topk,num_draft_tokens or JSON paths (speedup, k, "
                                                "serve); k then counts tree tokens")
    p.add_argument("--draft-kv-budget", default=None, help="--drafter self: KV tokens a draft step reads")
    p.add_argument("--draft-layer-fraction", default=None, type=float, help="--drafter self: share of the layers")
    p.add_argument("--concurrency", default=None, help="serve: closed-loop clients instead of --rate, 1..64")
    p.add_argument("--baseline", default="off", help="serve: the policy crossovers are drawn against (default off)")
    add_deployment_arguments(p)
    chart_alphas = ",".join(f"{a:g}" for a in DEFAULT_CHART_ALPHAS)
    p.add_argument("--alpha", default=None, help=f"acceptance rate(s): speedup takes one (default {DEFAULT_ALPHA:g}), "
                                                 f"k several (default {chart_alphas})")
    add_acceptance_source_arguments(p)
    p.add_argument("--batch", default=None, help="batch sizes: roofline 1,8,64,256; speedup 1..1024; k and "
                                                 f"breakdown one value (default {DEFAULT_BATCH})")
    p.add_argument("--ctx", default=None, help="contexts: roofline 1k,32k; speedup 512..128k; k one value "
                                               f"({format_count(DEFAULT_CONTEXT_TOKENS)}); breakdown a range (default "
                                               "256..the model's max)")
    p.add_argument("--k", default=None, help="roofline: verify k (default 4); speedup/k: draft lengths (default "
                                             f"0..{DEFAULT_K_MAX}); breakdown: price a verify step of k + 1 tokens "
                                             "(default: decode)")
    p.add_argument("--per-op", action="store_true", help="roofline: add the ops of one decode step")
    p.add_argument("--report", help="validation report JSON written by 'rooflinesim validate' (validation)")
    p.add_argument("--allow-long-context", action="store_true", help="model a context above the model's max (warns)")
    p.add_argument("--rate", default=None, help="serve: request rates, 1..32 or 1,2,4 (default 1..32)")
    p.add_argument("--policy", default=None, help="serve: speculation policies (default off,fixed:4,dynamic)")
    p.add_argument("--requests", type=int, default=None,
                   help=f"serve: requests per run (default {DEFAULT_SERVE_REQUESTS})")
    p.set_defaults(handler=cmd_plot)

    p = sub.add_parser("list", help="list shipped hardware, models, engine profiles or acceptance presets")
    p.add_argument("what", choices=["hardware", "models", "engines", "acceptance"])
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(handler=cmd_list)

    from .acceptance import add_acceptance_parser  # the `acceptance` command and its subcommands

    add_acceptance_parser(sub)

    p = sub.add_parser("explore", help="a local web page over predict, sweep and serve (the same answers)")
    p.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    p.add_argument("--allow-remote", action="store_true",
                   help="listen on a --host other machines can reach (the page has no login: anyone who reaches it "
                        "can run pricing commands and read spec files this user can read)")
    p.add_argument("--no-browser", action="store_true", help="print the URL only, do not open a browser")
    p.add_argument("--calibration", default=None, help="measured profile YAML applied to every view (the page can "
                                                       "override it per view)")
    p.set_defaults(handler=cmd_explore)

    p = sub.add_parser("show", help="one hardware or model spec with its derived numbers")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("calibrate", help="measure this device with torch microbenchmarks and write a profile YAML")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--dtype", default=None, help="compute dtypes to measure, e.g. bf16,fp32 (default: fp32, and bf16 "
                                                 "where the device computes it natively: CUDA, or a CPU with "
                                                 "avx512_bf16 / amx_bf16; --model: the profile's dtypes)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's; recorded in the profile)")
    p.add_argument("--quick", action="store_true", help="a run sized to <= 30 s on any CPU (the quick plan or less)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="size the run to this many seconds: probe the device, then fit the grid and repetitions")
    p.add_argument("--shapes-of", default=None, metavar="MODEL[,MODEL]",
                   help="also time these models' own linear weight shapes (names, YAML or config.json), so the "
                        "profile prices them from their own tables; it is then no hold-out for them")
    p.add_argument("--merge", nargs="+", default=None, metavar="PROFILE",
                   help="combine profiles of the same device into --out (no measuring; narrows the intervals)")
    p.add_argument("--model", default=None, metavar="PATH_OR_NAME",
                   help="instead: time this model (config.json, a local Hugging Face checkpoint folder or a model "
                        "name) at a few points and fit its own terms on top of --profile (validate --family model "
                        "checks them)")
    p.add_argument("--impl", default=None, choices=("hf", "reference"),
                   help="--model: run it in transformers (default for a config with rooflinesim[hf]) or in the "
                        "project's reference decoder")
    p.add_argument("--profile", default=None, help="--model: the device profile to extend (default "
                                                   "calibrate/<device-name>/<device-name>.yaml; written in place unless --out)")
    p.add_argument("--out", default=None, help="profile path (default calibrate/<device-name>/<device-name>.yaml)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_calibrate)

    p = sub.add_parser("validate", help="time a hold-out decoder and a speculative loop; compare with predictions")
    p.add_argument("--profile", default=None, help="measured profile YAML (default calibrate/<device-name>/<device-name>.yaml)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--dtype", default=None, help="dtype to validate (default: each dtype the profile measured)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: the profile's)")
    p.add_argument("--quick", action="store_true", help="a smaller grid")
    p.add_argument("--model", default=None,
                   help="hold-out target model (default tiny-llama-123m; with --family model: the model whose "
                        "'calibrate --model' terms the profile carries)")
    p.add_argument("--draft", default="tiny-draft-2l", help="hold-out drafter (default tiny-draft-2l)")
    p.add_argument("--out-dir", default=None, help="where the JSON and PNG go (default: the profile's folder)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--family", default=None, metavar="hf,gptfast,project",
                   help="instead: decode steps of hold-out implementations written outside the project (hf: "
                        "Hugging Face transformers models, needs rooflinesim[hf]; gptfast: a gpt-fast-style decoder) "
                        "beside the project's own family (project); median/p90 error and interval coverage each")
    p.add_argument("--tiny", action="store_true", help="--family: the smoke-test grid (batch 1-2, context 64; a "
                                                       "dry run of the tooling, not a measurement)")
    p.add_argument("--remeasure", action="store_true", help="--family: measure every step again after the first "
                   "pass and report how far the two measurements lie apart (the machine's own floor under the errors)")
    p.add_argument("--serve", action="store_true", help="instead: a measured continuous-batching loop (Poisson "
                   "arrivals, off and fixed:K) against 'rooflinesim serve' on the same requests (~2-3 min on 2 cores)")
    p.add_argument("--load", type=float, default=None, help="--serve: offered load as a share of off's simulated "
                   "capacity on the profile (default 0.6)")
    p.add_argument("--rate", type=float, default=None, help="--serve: requests per second instead of --load")
    p.add_argument("--requests", type=int, default=None, help="--serve: requests per policy (default 60)")
    p.add_argument("--k", type=int, default=None, help="--serve: drafts per step of the speculative run (default 2)")
    p.set_defaults(handler=cmd_validate)
    return parser


def cmd_explore(args) -> int:
    """The web server is handed the command line's parser and commands (explore sits left of cli in the layers and
    never imports it): every API answer is parsed and priced by exactly the code behind `rooflinesim CMD --json`."""
    from ..explore.server import run_server
    from .api import CommandApi

    api = CommandApi(lambda: build_parser(raising=True), calibration=args.calibration)
    return run_server(api, host=args.host, port=args.port, allow_remote=args.allow_remote,
                      open_browser=not args.no_browser)


def _attach_negative_values(argv: list[str]) -> list[str]:
    """argparse reads `--k -1..2` as two options ("expected one argument"); hand a value that starts with a minus
    and a digit to its option, so the option's own check can say what is wrong with it."""
    out: list[str] = []
    for item in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.match(r"^-\d", item):
            out[-1] = f"{out[-1]}={item}"
        else:
            out.append(item)
    return out


def one_line(message: str) -> str:
    """A message as one terminal line: a parser's line breaks become spaces, and any other character that is not
    printable (a control character in a file name the user gave, which str.splitlines and some terminals take for a
    line break) is shown escaped, as repr would."""
    message = message.replace("\r\n", " ").replace("\n", " ")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def _library_warning_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    """Warnings raised by libraries (numpy, matplotlib, scipy) while a command ran, as the tool's own one-line
    warnings: the message without the category, file and source line Python would print, each message once."""
    lines: list[str] = []
    for item in caught:
        module = (item.filename or "").replace("\\", "/")
        origin = next((name for name in ("numpy", "matplotlib", "scipy", "pandas", "torch") if f"/{name}/" in module),
                      None)
        line = "warning: " + one_line(" ".join(str(item.message).split())) + (f" (from {origin})" if origin else "")
        if line not in lines:
            lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_negative_values(list(sys.argv[1:] if argv is None else argv)))
    # no library warning reaches the user raw (category, file and source line): each becomes one line of the tool's
    # own after the command, and none is printed when the command refuses its input (the error is the one line)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            code = args.handler(args)
        except USER_ERRORS as exc:
            print(f"rooflinesim: error: {one_line(str(exc))}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt:
            print("rooflinesim: interrupted", file=sys.stderr)
            return 130
    for line in _library_warning_lines(caught):
        print(line, file=sys.stderr)
    return code
