"""Hostile input files for the bad-input tests (tests/test_bad_input*.py): binary garbage, malformed YAML, broken
Hugging Face configs, measured profiles with impossible fits, specs with non-finite or absurd numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
PROFILE = ROOT / "tests" / "data" / "profiles" / "cpu-intel-xeon-2c.yaml"  # a frozen copy
GARBAGE = bytes(range(256)) * 4  # invalid UTF-8 and control characters


def replace_line(source: Path, field: str, value: str) -> str:
    lines = source.read_text().splitlines()
    assert any(line.startswith(f"{field}:") for line in lines), (source, field)
    return "\n".join(f"{field}: {value}" if line.startswith(f"{field}:") else line for line in lines) + "\n"


def _profile_variant(data: dict, change) -> str:
    data = json.loads(json.dumps(data))  # a deep copy
    change(data["measured"]["dtypes"]["fp32"])
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _decode_fit(dtype_data: dict) -> dict:
    return dtype_data["attention"][next(k for k in dtype_data["attention"] if k.startswith("decode"))]


def write_hostile_files(folder: Path) -> dict[str, str]:
    """Write every hostile input file into `folder`: {file name: path} (plus a few good files by name)."""
    hf = json.loads((DATA / "llama-hf-config.json").read_text())
    profile = yaml.load(PROFILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    h100, llama = ROOT / "hardware" / "h100-sxm-80gb.yaml", ROOT / "models" / "llama-3.1-8b.yaml"
    files = {
        "garbage.yaml": GARBAGE,
        "garbage.json": GARBAGE,
        "malformed.yaml": "name: test\npeak_flops_per_s: [unclosed\n",
        "empty.yaml": "",
        "hf-zero-heads.json": json.dumps({**hf, "num_attention_heads": 0}),
        "hf-list.json": "[1, 2, 3]",
        "hf-string.json": '"a config"',
        "hf-infinity.json": json.dumps({**hf, "hidden_size": "INF"}).replace('"INF"', "Infinity"),
        "hf-4095.json": json.dumps({**{k: v for k, v in hf.items() if k != "head_dim"}, "hidden_size": 4095}),
        "hf-truncated.json": json.dumps(hf)[:100],
        "profile-attention-empty.yaml": _profile_variant(profile, lambda d: d.update(attention={})),
        "profile-attention-unknown.yaml": _profile_variant(
            profile, lambda d: d["attention"].update(sparse_d64=_decode_fit(d))),
        "profile-negative.yaml": _profile_variant(
            profile, lambda d: _decode_fit(d)["coefficients"].update(kv_bytes=-1e-9)),
        "profile-nan.yaml": _profile_variant(profile, lambda d: d.update(layer_overhead_s=float("nan"))),
        "hw-inf.yaml": replace_line(h100, "memory_bandwidth_bytes_per_s", ".inf"),
        "hw-nan.yaml": replace_line(h100, "memory_bandwidth_bytes_per_s", ".nan"),
        "hw-true.yaml": replace_line(h100, "memory_bandwidth_bytes_per_s", "true"),
        "hw-string.yaml": replace_line(h100, "memory_capacity_bytes", "80GB"),
        "hw-tiny-bandwidth.yaml": replace_line(h100, "memory_bandwidth_bytes_per_s", "1.0e-300"),
        "hw-tiny-peak.yaml": re.sub(r"^  bf16: .*$", "  bf16: 1.0e-300", h100.read_text(), count=1, flags=re.M),
        "profile-huge.yaml": _profile_variant(
            profile, lambda d: _decode_fit(d)["coefficients"].update(kv_bytes=1e300)),
        "model-fraction.yaml": replace_line(llama, "hidden_size", "4096.7"),
        "model-nan.yaml": replace_line(llama, "num_layers", ".nan"),
        "model-bool.yaml": replace_line(llama, "vocab_size", "true"),
        "tiny-moe.yaml": (ROOT / "models" / "tiny-llama-123m.yaml").read_text().replace("aliases: [tiny-llama-123m, tiny-llama]", "aliases: [tiny-moe]")
        + "moe:\n  num_experts: 4\n  num_experts_per_token: 2\n  moe_intermediate_size: 1024\n",
        "report-not-a-report.json": json.dumps({"hello": "world"}),
        "report-rows.json": json.dumps({"configs": ["decode"]}),
        "report-infinite.json": json.dumps({"configs": [{"kind": "decode", "measured_s": 1e-3, "predicted_s": 1e-3,
                                                         "roofline_s": float("inf")}]}),
    }
    paths = {}
    for name, content in files.items():
        path = folder / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        paths[name] = str(path)
    paths["missing.yaml"] = str(folder / "missing.yaml")
    paths["profile"] = str(PROFILE)
    paths["h100.yaml"] = str(h100)
    paths["llama.yaml"] = str(llama)
    return paths


def expand(args, inputs: dict, out: Path) -> list[str]:
    names = {k.replace(".", "_").replace("-", "_"): v for k, v in inputs.items()}
    return [str(a).format(out=out, **names) for a in args]
