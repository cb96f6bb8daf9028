"""A non-editable install, run from an unrelated directory, finds the shipped hardware and model YAMLs."""

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_ships_specs_and_predict_runs_from_a_temp_dir(tmp_path):
    wheel_dir, source = tmp_path / "wheel", tmp_path / "source"
    # build from a copy so a stale build/ folder in the checkout cannot leak into the wheel
    skip = {".git", "build", "dist", "__pycache__", ".hypothesis", ".pytest_cache", "rooflinesim.egg-info"}
    shutil.copytree(ROOT, source, ignore=lambda folder, names: [n for n in names if n in skip])
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheel_dir), str(source)], check=True, capture_output=True)
    wheel = next(wheel_dir.glob("rooflinesim-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "rooflinesim/data/hardware/a100-sxm-80gb.yaml" in names
    assert "rooflinesim/data/models/llama-3.1-8b.yaml" in names
    # dependencies come from this interpreter's site-packages; rooflinesim itself only from the wheel
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   capture_output=True)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    where = subprocess.run([str(python), "-c", "import rooflinesim; print(rooflinesim.__file__)"], cwd=workdir,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(env_dir), where
    proc = subprocess.run([str(env_dir / "bin" / "rooflinesim"), "predict", "--hw", "h200", "--json"], cwd=workdir,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hardware"]["name"] == "NVIDIA H200 SXM 141GB"
    listing = subprocess.run([str(env_dir / "bin" / "rooflinesim"), "list", "models"], cwd=workdir,
                             capture_output=True, text=True)
    assert "llama-2-70b" in listing.stdout
