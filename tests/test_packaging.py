"""A non-editable install, run from an unrelated directory, finds the shipped hardware and model YAMLs.

The wheel goes into a fresh venv that sees no site-packages but its own, so rooflinesim can only come from the
wheel. Its dependencies come from the interpreter running the tests, whichever it is (the system Python, an activated
venv made from it, a venv whose base has none of them): a .pth file in the inner venv lists the running interpreter's
site directories. `system_site_packages=True` would read the *base* interpreter's site-packages instead, which inside
an activated venv may lack the dependencies altogether (issue 9).
"""

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# probed in the inner venv: each must resolve to the very file the running interpreter imports
DEPENDENCIES = ("numpy", "scipy", "pydantic", "yaml", "rich")


def get_site_dirs() -> list[str]:
    """Where the running interpreter's installed packages live (not sys.path: that holds this checkout, via pytest's
    rootdir insertion or PYTHONPATH, which would let the inner venv import rooflinesim from source)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    paths = sysconfig.get_paths()
    dirs += [paths["purelib"], paths["platlib"]]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def get_clean_env() -> dict:
    """The environment minus what would put this checkout or another interpreter's packages on the inner path."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def make_inner_venv(env_dir: Path) -> Path:
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             env=get_clean_env(), capture_output=True, text=True, check=True).stdout.strip()
    # .pth lines are appended to sys.path after the venv's own site-packages, so the wheel installed there wins; the
    # listed folders' own .pth files are not run, so an editable rooflinesim installed there stays inactive
    (Path(purelib) / "outer_site_dirs.pth").write_text("".join(f"{d}\n" for d in get_site_dirs()))
    return python


@pytest.mark.slow
def test_wheel_ships_specs_and_predict_runs_from_a_temp_dir(tmp_path):
    wheel_dir, source = tmp_path / "wheel", tmp_path / "source"
    # build from a copy so a stale build/ folder in the checkout cannot leak into the wheel
    skip = {".git", "build", "dist", "__pycache__", ".hypothesis", ".pytest_cache", "rooflinesim.egg-info", ".venv"}
    shutil.copytree(ROOT, source, ignore=lambda folder, names: [n for n in names if n in skip])
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(wheel_dir), str(source)], capture_output=True, text=True)
    # without isolation (offline): the build backend must be installed here, as scripts/setup-dev.sh does
    assert built.returncode == 0, built.stderr
    wheel = next(wheel_dir.glob("rooflinesim-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "rooflinesim/data/hardware/a100-sxm-80gb.yaml" in names
    assert "rooflinesim/data/models/llama-3.1-8b.yaml" in names
    for page in ("index.html", "app.js", "style.css", "vendor/plotly-cartesian.min.js", "vendor/plotly-LICENSE.txt"):
        assert f"rooflinesim/explore/static/{page}" in names  # `rooflinesim explore` works from an installed wheel
    assert "rooflinesim/data/engines/vllm-v1.yaml" in names and "rooflinesim/data/engines/ideal.yaml" in names
    assert {f"rooflinesim/data/implementations/{n}.yaml" for n in ("reference", "hf", "gptfast")} <= set(names)

    env_dir = tmp_path / "venv"
    python = make_inner_venv(env_dir)
    env = get_clean_env()
    installed = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                               env=env, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    probe = "import importlib, json, sys; print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))"
    inner = json.loads(subprocess.run([str(python), "-c", probe, "rooflinesim", *DEPENDENCIES], cwd=workdir, env=env,
                                      capture_output=True, text=True, check=True).stdout)
    assert Path(inner["rooflinesim"]).is_relative_to(env_dir), inner["rooflinesim"]
    for name in DEPENDENCIES:  # the running interpreter's copy, not the base interpreter's
        module = __import__(name)
        assert Path(inner[name]).resolve() == Path(module.__file__).resolve(), (name, inner[name], module.__file__)
    rooflinesim_cli = env_dir / "bin" / "rooflinesim"
    proc = subprocess.run([str(rooflinesim_cli), "predict", "--hw", "h200", "--json"], cwd=workdir, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hardware"]["name"] == "NVIDIA H200 SXM 141GB"
    listing = subprocess.run([str(rooflinesim_cli), "list", "models"], cwd=workdir, env=env, capture_output=True,
                             text=True)
    assert listing.returncode == 0, listing.stderr
    assert "llama-2-70b" in listing.stdout


def test_pyproject_lists_every_package():
    """setuptools ships only the packages pyproject.toml names: a new subpackage left out of the list would be missing
    from the wheel (and only the slow wheel test would notice)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "rooflinesim").rglob("__init__.py")}
    assert found - listed == set(), f"packages missing from pyproject.toml: {sorted(found - listed)}"
