"""Name, alias or path -> validated spec.

Shipped YAML files live in the wheel as `rooflinesim.data/{hardware,models,engines}`; in a source checkout the same folders sit
at the repository root. Paths to YAML files (and Hugging Face `config.json` files for models) are accepted anywhere a
name is.
"""

from __future__ import annotations

import difflib
import os
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterable, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .hf_config import SUPPORTED_HF_ARCHITECTURES, model_from_hf_config
from .base import SpecError, check_spec_file, format_validation_error, one_line, read_spec_text
from .engine import EngineSpec
from .hardware import HardwareSpec
from .model import ModelSpec


# libyaml's C loader parses the shipped specs ~10x faster than the pure-Python one (predict reads every file's name).
class _SpecLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """Safe YAML loading that also reads `3.35e12` and `1e9` as numbers.

    PyYAML follows YAML 1.1, whose floats need a dot and a signed exponent (`3.35e+12`): it reads `3.35e12` as a
    string. Specs are validated strictly (a string is never taken for a number), so exponent forms are resolved as
    floats here, as YAML 1.2 and JSON do. Plain integers keep resolving as integers (the int resolver comes first).
    """


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


#: nesting no spec comes near; libyaml's C composer recurses without a limit and overflows the C stack (a
#: segmentation fault, not a RecursionError) somewhere between 10,000 and 30,000 levels
MAX_YAML_DEPTH = 1000
_DEEP_BLOCK = re.compile(r"(?:-[ \t]+){%d}|^[ \t]{%d}" % (MAX_YAML_DEPTH, 4 * MAX_YAML_DEPTH), re.M)


def _check_yaml_depth(text: str) -> None:
    """RecursionError (reported as 'nested too deeply') for text nested deeper than MAX_YAML_DEPTH: flow
    collections ([ and {, counted without regard to quoting: a spec has no such runs), chains of '- ' block
    sequences, or indentation beyond 4 x MAX_YAML_DEPTH columns."""
    if text.count("[") + text.count("{") > MAX_YAML_DEPTH:
        depth = deepest = 0
        for char in re.sub(r"[^\[\]{}]+", "", text):
            depth = depth + 1 if char in "[{" else max(depth - 1, 0)
            deepest = max(deepest, depth)
        if deepest > MAX_YAML_DEPTH:
            raise RecursionError(f"nested {deepest} levels deep")
    if _DEEP_BLOCK.search(text):
        raise RecursionError("nested too deeply")


def load_yaml(text: str):
    """Parse spec YAML (safe; exponent floats such as `3.35e12` are numbers)."""
    _check_yaml_depth(text)
    return yaml.load(text, Loader=_SpecLoader)


SpecT = TypeVar("SpecT", bound=BaseModel)

#: Top-level keys that only a model file has, and keys that only a hardware file (or a measured profile) has: how
#: `load_any_spec` tells which schema a file is written for without trying both and reporting the wrong one's errors.
MODEL_KEYS = frozenset({"num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "intermediate_size",
                        "vocab_size", "max_context_tokens", "architecture", "moe", "mla"})
HARDWARE_KEYS = frozenset({"memory_bandwidth_bytes_per_s", "peak_flops_per_s", "memory_capacity_bytes",
                           "last_level_cache_bytes", "efficiency", "interconnect", "measured"})


def _data_dirs(kind: str) -> list[Path]:
    dirs = []
    try:
        packaged = resources.files("rooflinesim.data") / kind
        if packaged.is_dir():
            dirs.append(Path(str(packaged)))
    except (ModuleNotFoundError, TypeError):
        pass
    checkout = Path(__file__).resolve().parents[2] / kind
    if checkout.is_dir() and checkout not in dirs:
        dirs.append(checkout)
    return dirs


_format_validation_error = format_validation_error  # the name older callers use


def _parse_yaml_mapping(path: Path, text: str) -> dict:
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{path}:{where}: malformed YAML: {one_line(getattr(exc, 'problem', None) or exc)}") from None
    except RecursionError:
        raise SpecError(f"{path}: malformed YAML: nested too deeply") from None
    if data is None:
        raise SpecError(f"{path}: the file is empty (or only comments): expected a mapping of fields")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    return data


def _validate(path: Path, data: dict, spec_type: type[SpecT]) -> SpecT:
    try:
        return spec_type.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(path, exc)) from None


def load_spec_file(path: str | Path, spec_type: type[SpecT]) -> SpecT:
    """Read and validate one YAML spec; any problem becomes a SpecError naming file, field and reason. The file is
    read every time; its parse is kept by path and content (a script pricing many points with one `--calibration`
    profile parses it once; a rewritten file is parsed again)."""
    path = Path(path)
    return _load_text_cached(str(path), spec_type, read_spec_text(path))


@lru_cache(maxsize=32)
def _load_text_cached(path: str, spec_type: type[SpecT], text: str) -> SpecT:
    return _validate(Path(path), _parse_yaml_mapping(Path(path), text), spec_type)


def get_spec_kind(path: str | Path, data: dict) -> str:
    """'hardware' or 'models': which schema a parsed spec file is written for, decided by its keys."""
    model, hardware = MODEL_KEYS & set(data), HARDWARE_KEYS & set(data)
    if model and hardware:
        raise SpecError(f"{path}: has both hardware keys ({', '.join(sorted(hardware))}) and model keys "
                        f"({', '.join(sorted(model))}): a spec file describes one or the other")
    if not model and not hardware:
        raise SpecError(f"{path}: neither a hardware nor a model spec (no {', '.join(sorted(HARDWARE_KEYS)[:3])}, "
                        f"... or {', '.join(sorted(MODEL_KEYS)[:3])}, ... key)")
    return "models" if model else "hardware"


@lru_cache(maxsize=None)
def _index(kind: str) -> dict[str, Path]:
    """Lower-case name/alias/file stem -> file, over the shipped files of one kind."""
    index: dict[str, Path] = {}
    for folder in _data_dirs(kind):
        for path in sorted(folder.glob("*.yaml")):
            try:
                head = load_yaml(path.read_text(encoding="utf-8"))
            except (yaml.YAMLError, OSError, UnicodeDecodeError):
                head = None  # reported with file and reason when the spec itself is loaded
            head = head if isinstance(head, dict) else {}
            keys = [path.stem, str(head.get("name", ""))] + [str(a) for a in head.get("aliases", []) or []]
            for key in keys:
                if key:
                    index.setdefault(key.lower(), path)
    return index


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml", ".json")) or "/" in name or "\\" in name


def _suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name.lower(), list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _resolve(name: str, kind: str) -> Path:
    if _looks_like_path(name):
        return _existing_file(name, kind)
    index = _index(kind)
    key = name.strip().lower()
    if key in index:
        return index[key]
    listing = f" (run 'rooflinesim list {kind}')"
    raise SpecError(f"unknown {kind.rstrip('s')} {name!r}{_suggest(key, index)}{listing}")


#: `org/name`: how a Hugging Face repository id looks (never a path that exists)
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _existing_file(name: str, kind: str) -> Path:
    try:
        path = Path(name).expanduser()
    except RuntimeError:  # "~someone/x.yaml" for a user that does not exist
        raise SpecError(f"{kind} file not found: {name} (no home folder for {name.split('/')[0]!r})") from None
    if kind == "models" and path.is_dir() and (path / "config.json").is_file():
        return check_spec_file(path / "config.json", f"{kind} file")  # a downloaded checkpoint's folder
    if not path.exists() and kind in ("models", "spec") and _HF_ID.match(name) and not name.endswith(
            (".yaml", ".yml", ".json")):
        raise SpecError(_hf_id_message(name))
    if kind == "models" and path.is_dir():
        raise SpecError(f"model folder {path} holds no config.json: give the folder of a Hugging Face "
                        "checkpoint, its config.json, a model YAML or a shipped name")
    return check_spec_file(path, f"{kind} file")


def _hf_id_message(name: str) -> str:
    """The one line for an `org/name` id: ids are not downloaded; the shipped model of that id, or close names."""
    shipped = {(m.hf_id or "").lower(): get_short_name(m) for m in list_models()}
    match = shipped.get(name.lower())
    close = difflib.get_close_matches(name.split("/")[-1].lower(), list(_index("models")), n=3, cutoff=0.5)
    hint = (f": use the shipped {match!r}" if match else
            f": shipped names close to it: {', '.join(close)}" if close else "")
    return (f"{name!r} looks like a Hugging Face id; ids are not downloaded{hint} (or give the folder of a "
            "downloaded checkpoint, its config.json, or a model YAML; 'rooflinesim list models')")


def get_shipped_model_by_hf_id(hf_id: str | None) -> ModelSpec | None:
    """The shipped model whose `hf_id` is this one (case-insensitive), if any."""
    if not hf_id:
        return None
    for model in list_models():
        if model.hf_id and model.hf_id.lower() == hf_id.lower():
            return model
    return None


def load_hardware(name: str | HardwareSpec) -> HardwareSpec:
    """A HardwareSpec from a short name (`a100`), full name, or path to a YAML file (datasheet or measured profile)."""
    if isinstance(name, HardwareSpec):
        return name
    return _load_file(_resolve(str(name), "hardware"), "hardware")


def load_model(name: str | ModelSpec) -> ModelSpec:
    """A ModelSpec from a short name (`llama-3.1-8b`), a YAML file, or a Hugging Face `config.json`."""
    if isinstance(name, ModelSpec):
        return name
    path = _resolve(str(name), "models")
    if path.suffix == ".json":
        return _with_shipped_family(model_from_hf_config(path))
    return _load_file(path, "models")


def _with_shipped_family(spec: ModelSpec) -> ModelSpec:
    """A config.json names its repository (`_name_or_path`): where a shipped model has that id, the config belongs
    to its tokenizer family (what picks a default draft)."""
    if spec.family is None:
        shipped = get_shipped_model_by_hf_id(spec.hf_id)
        if shipped is not None:
            return spec.model_copy(update={"family": shipped.family})
    return spec


def load_any_spec(name: str | HardwareSpec | ModelSpec) -> HardwareSpec | ModelSpec:
    """A hardware or model spec, whichever `name` is (`show`).

    A path is read with the schema its content is written for (a model file has `num_layers`, a hardware file
    `memory_bandwidth_bytes_per_s`, ...), so a broken model file reports the model schema's error, not the hardware
    schema's; a `.json` path is a Hugging Face config. A name is looked up among hardware, then models.
    """
    if isinstance(name, (HardwareSpec, ModelSpec)):
        return name
    name = str(name)
    if _looks_like_path(name):
        path = _existing_file(name, "models" if Path(name).expanduser().is_dir() else "spec")
        if path.suffix == ".json":
            return _with_shipped_family(model_from_hf_config(path))
        return _load_file(path, None)
    key = name.strip().lower()
    for kind in ("hardware", "models"):
        if key in _index(kind):
            return _load_file(_index(kind)[key], kind)
    choices = list(_index("hardware")) + list(_index("models"))
    raise SpecError(f"unknown hardware or model {name!r}{_suggest(key, choices)} "
                    "(run 'rooflinesim list hardware' or 'rooflinesim list models')")


def _load_file(path: Path, kind: str | None) -> HardwareSpec | ModelSpec:
    """Parse and validate a spec file, cached by its path and content (a file rewritten in the same process is
    read again); `kind` None decides the schema from the content."""
    return _load_cached(str(path), kind, _read_spec(path))


@lru_cache(maxsize=None)
def _shipped_dirs() -> frozenset[Path]:
    return frozenset(d for kind in ("hardware", "models", "engines") for d in _data_dirs(kind))


#: the text of each shipped spec file read so far, by path: (its os.stat signature, text)
_SHIPPED_TEXT: dict[str, tuple[tuple[int, int, int], str]] = {}


def _read_spec(path: Path) -> str:
    """`read_spec_text`, except that a shipped file (the package's own specs, which `list_models` and the default
    draft read on every call) is read again only when its size, mtime or inode changed. A user's file is always
    read: it may be rewritten within one timestamp tick at the same size."""
    key = str(path)
    cached = _SHIPPED_TEXT.get(key)  # only shipped files are ever kept
    if cached is None and path.parent not in _shipped_dirs():
        return read_spec_text(path)
    try:
        stat = os.stat(key)
    except OSError:
        return read_spec_text(path)  # its one-line error
    signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    if cached is not None and cached[0] == signature:
        return cached[1]
    text = read_spec_text(path)
    _SHIPPED_TEXT[key] = (signature, text)
    return text


@lru_cache(maxsize=256)
def _load_cached(path: str, kind: str | None, text: str):
    data = _parse_yaml_mapping(Path(path), text)
    found = get_spec_kind(path, data) if kind is None else _get_clear_kind(data)
    if kind is not None and found not in (None, kind):  # e.g. a model file given as --hw
        raise SpecError(f"{path}: a {_KIND_NAMES[found]} spec, not a {_KIND_NAMES[kind]} spec")
    return _validate(Path(path), data, HardwareSpec if (kind or found) == "hardware" else ModelSpec)


_KIND_NAMES = {"hardware": "hardware", "models": "model"}


def _get_clear_kind(data: dict) -> str | None:
    """The kind a file's keys clearly belong to, or None when they are mixed or neither (then the schema asked for
    reports what is wrong)."""
    model, hardware = bool(MODEL_KEYS & set(data)), bool(HARDWARE_KEYS & set(data))
    return None if model == hardware else ("models" if model else "hardware")


def load_engine(name: str | EngineSpec) -> EngineSpec:
    """An EngineSpec from a short name (`vllm-v1`), full name, or path to a YAML file (`engines/*.yaml`); an unknown
    name suggests close ones."""
    if isinstance(name, EngineSpec):
        return name
    path = _resolve(str(name), "engines")
    return _load_engine_cached(str(path), _read_spec(path))


@lru_cache(maxsize=64)
def _load_engine_cached(path: str, text: str) -> EngineSpec:
    return _validate(Path(path), _parse_yaml_mapping(Path(path), text), EngineSpec)


def list_engines() -> list[EngineSpec]:
    return [load_engine(str(p)) for p in sorted(set(_index("engines").values()))]


def list_hardware() -> list[HardwareSpec]:
    return _list("hardware")


def list_models() -> list[ModelSpec]:
    return _list("models")


def _list(kind: str) -> list:
    """Every shipped spec of a kind (the index's files: already resolved, so they are loaded directly)."""
    return [_load_file(p, kind) for p in _index_files(kind)]


@lru_cache(maxsize=None)
def _index_files(kind: str) -> tuple[Path, ...]:
    return tuple(sorted(set(_index(kind).values())))


def get_short_name(spec: HardwareSpec | ModelSpec) -> str:
    return spec.aliases[0] if spec.aliases else spec.name


__all__ = [
    "SpecError", "SUPPORTED_HF_ARCHITECTURES", "MODEL_KEYS", "HARDWARE_KEYS", "load_yaml", "load_spec_file",
    "get_spec_kind", "load_hardware", "load_model", "load_any_spec", "model_from_hf_config", "list_hardware",
    "list_models", "get_short_name", "load_engine", "list_engines", "get_shipped_model_by_hf_id",
]
