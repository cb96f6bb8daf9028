"""The package's imports, lazy ones included, flow one way: every module imports only its own layer and the layers to
its left in README's data-flow order, and no import cycle exists anywhere."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rooflinesim"

#: README "Data flow", left to right. A module may import its own layer and those before it, never one after it.
LAYERS = [
    "units", "errors", "fileio", "specs", "ops", "timing", "step", "acceptance", "scenario", "pricing", "serve",
    "report", "plots", "calibrate", "cli",
]
#: What the layers may import from outside the standard library and numpy/scipy/pydantic/yaml (lazily or not).
HEAVY = {"torch": {"calibrate"}, "matplotlib": {"plots", "calibrate"}}
# (calibrate is the torch leaf: nothing but the command line, which composes every command, imports it)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, source: str | None = None) -> set[str]:
    """Every module this file imports, at any depth of the file (lazy imports inside functions included)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            submodules = set()
            for alias in node.names:  # `from . import model` imports a submodule, not the package's names
                candidate = f"{target}.{alias.name}"
                if (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                        (PACKAGE.parent / Path(*candidate.split(".")) / "__init__.py").exists():
                    submodules.add(candidate)
            found.update(submodules or {target})
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "rooflinesim" else None


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        graph[_module_name(path)] = {m for m in _imports(path) if m.split(".")[0] == "rooflinesim" or
                                     m.split(".")[0] in HEAVY}
    return graph


def test_every_module_sits_in_a_documented_layer():
    for module in _graph():
        if module != "rooflinesim":
            assert _layer(module) in LAYERS, f"{module} is in no layer of LAYERS (and README's data flow)"


def test_imports_flow_one_way():
    wrong = []
    for module, imported in _graph().items():
        layer = _layer(module)
        if layer is None:  # the package root re-exports the flat public API
            continue
        for target in imported:
            top = target.split(".")[0]
            if top in HEAVY:
                if layer not in HEAVY[top]:
                    wrong.append(f"{module} imports {target}")
                continue
            other = _layer(target)
            if other is None or LAYERS.index(other) > LAYERS.index(layer):
                wrong.append(f"{module} ({layer}) imports {target} ({other}), a layer to its right")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = {m: {t for t in targets if t in _graph_nodes()} for m, targets in _graph().items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or nxt == "rooflinesim":
                continue
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _graph_nodes() -> set[str]:
    return {_module_name(p) for p in PACKAGE.rglob("*.py")}


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: a function-level relative import is found (so the layer test can fail)."""
    source = PACKAGE / "scenario" / "builder.py"
    assert "rooflinesim.specs.profiles" in _imports(source)  # imported inside build_scenario
    assert "rooflinesim.step" in _imports(source)


#: calibrate's subpackages, in import order (`rooflinesim/calibrate/__init__.py`): each imports only itself and those
#: to its left; `fitting` is the torch-free part
CALIBRATE_LAYERS = ["fitting", "reference", "measure", "validators", "external"]


def _runtime_imports(path: Path) -> set[str]:
    """The file's imports without those under `if TYPE_CHECKING:` (annotations only, never executed)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    return _imports(path, ast.unparse(tree))


def test_every_calibrate_module_sits_in_a_subpackage():
    for path in (PACKAGE / "calibrate").rglob("*.py"):
        parts = path.relative_to(PACKAGE / "calibrate").parts
        assert len(parts) == 1 and parts[0] == "__init__.py" or parts[0] in CALIBRATE_LAYERS, \
            f"{path.relative_to(PACKAGE)} is in no subpackage of CALIBRATE_LAYERS"


def test_calibrate_subpackages_import_one_way():
    wrong = []
    for path in sorted((PACKAGE / "calibrate").rglob("*.py")):
        sub = path.relative_to(PACKAGE / "calibrate").parts[0]
        if sub not in CALIBRATE_LAYERS:
            continue
        for target in _runtime_imports(path):
            parts = target.split(".")
            if parts[:2] == ["rooflinesim", "calibrate"] and len(parts) > 2 and \
                    CALIBRATE_LAYERS.index(parts[2]) > CALIBRATE_LAYERS.index(sub):
                wrong.append(f"{_module_name(path)} ({sub}) imports {target}, a subpackage to its right")
            if sub == "fitting" and parts[0] in HEAVY:
                wrong.append(f"{_module_name(path)} imports {target}: calibrate.fitting is the torch-free part")
    assert not wrong, "\n".join(wrong)


def test_calibrate_fitting_imports_without_torch():
    """Importing every module of calibrate.fitting (planning, budget, fitting, merging, hold-out family) and the
    torch-free report module pulls in neither torch nor matplotlib."""
    modules = sorted(_module_name(p) for p in (PACKAGE / "calibrate" / "fitting").glob("*.py"))
    modules.append("rooflinesim.calibrate.validators.validate_summary")
    assert "rooflinesim.calibrate.fitting.merge" in modules and "rooflinesim.calibrate.fitting.plan" in modules
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_units_is_the_only_home_of_unit_constants():
    """No literal binary (2**20) or decimal (x 1e9, / 1e6) scale factor outside units.py: each comes from its named
    constant (`units.GIGA`, `units.MIB`, `units.MILLI`, ...). Dimensionless tolerances (1e-9) are not unit constants."""
    import re

    literal = re.compile(r"2\s*\*\*\s*(10|20|30|40)\b|[*/]\s*1e(3|6|9|12|15)\b|\b1024\s*\*\*\s*[234]\b")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "units.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if literal.search(code) and '"""' not in code and "tolerance" not in code:
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
