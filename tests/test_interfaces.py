"""Interfaces with names (issue 28, item 3): the scenario's options in groups, flat keywords mapped onto them by one
function, `predict` and `sweep` showing every option in their signatures and help(), and no front end repeating a
default the scenario owns."""

import dataclasses
import inspect
import pydoc
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rooflinesim
from rooflinesim.errors import InputError
from rooflinesim.pricing.sweep import sweep
from rooflinesim.scenario import inputs
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.scenario.groups import (
    DEFAULT, FLAT_OPTIONS, GROUPS, Deployment, Memory, Precision, Sampling, ScenarioOptions, Speculation,
    get_default, get_scenario_options,
)

#: the options `predict` takes positionally (hw, model) and `sweep` too (draft, alpha; its `k` is the grid)
PREDICT_POSITIONAL = ("hw", "model")
SWEEP_POSITIONAL = ("hw", "model", "draft", "alpha")


def _keyword_only(function) -> dict[str, inspect.Parameter]:
    return {name: p for name, p in inspect.signature(function).parameters.items() if p.kind is p.KEYWORD_ONLY}


# --- the groups ----------------------------------------------------------------------------------------------------

def test_every_field_has_a_doc_and_one_flat_keyword():
    seen = set()
    for group in GROUPS.values():
        for f in dataclasses.fields(group):
            assert len(f.metadata["doc"]) > 20, f"{group.__name__}.{f.name} needs a docstring with its unit"
            flat = f.metadata["flat"] or f.name
            assert flat not in seen, f"two fields answer to the flat keyword {flat}"
            seen.add(flat)
            assert FLAT_OPTIONS[flat] == (next(k for k, g in GROUPS.items() if g is group), f.name)
            assert f"[{f.default!r}]" in group.__doc__  # help(Group) shows the default beside the meaning
    assert seen == set(FLAT_OPTIONS)


def test_groups_are_frozen_and_defaults_are_the_groups():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Speculation().k = 3
    assert get_scenario_options() == ScenarioOptions()
    assert get_default("quant_group_size") == Precision().quant_group_size == rooflinesim.units.DEFAULT_QUANT_GROUP_SIZE
    assert get_default("head_layer_fraction") == inputs.DEFAULT_HEAD_LAYER_FRACTION


# a value for each flat keyword that differs from its default (the mapping only moves values: nothing is checked)
_VALUES = st.sampled_from([0, 1, 2, 0.5, "x", None, True, False, (1, 2)])


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(FLAT_OPTIONS)), _VALUES, max_size=8))
def test_each_flat_keyword_lands_on_its_field(flat):
    options = get_scenario_options(**flat)
    for name, value in flat.items():
        group, field_name = FLAT_OPTIONS[name]
        assert getattr(getattr(options, group), field_name) == value
    untouched = {FLAT_OPTIONS[n] for n in FLAT_OPTIONS} - {FLAT_OPTIONS[n] for n in flat}
    for group, field_name in untouched:
        assert getattr(getattr(options, group), field_name) == getattr(getattr(ScenarioOptions(), group), field_name)


def test_flat_keywords_win_over_their_group_and_default_is_not_given():
    options = get_scenario_options(speculation=Speculation(k=2, alpha=0.6), k=5, alpha=DEFAULT, sampling=True)
    assert (options.speculation.k, options.speculation.alpha, options.sampling.priced) == (5, 0.6, True)
    assert get_scenario_options(sampling=Sampling(priced=True)).sampling.priced is True


def test_unknown_keyword_and_wrong_group_are_clear():
    with pytest.raises(TypeError, match="draft_tp"):
        get_scenario_options(draft_pt=2)
    with pytest.raises(InputError, match="Deployment"):
        build_scenario(deployment="h100")
    with pytest.raises(TypeError, match="unexpected keyword"):
        rooflinesim.predict(kk=3)


def test_groups_and_flat_keywords_price_the_same(ideal_engine):
    flat = rooflinesim.predict("h100", "llama-3.1-70b", 8, "16k", tp=4, k=3, alpha=0.75, weight_dtype="fp8",
                               gpu_memory_utilization=0.8, sampling=True)
    grouped = rooflinesim.predict(batch=8, ctx="16k", deployment=Deployment("h100", "llama-3.1-70b", tp=4),
                                  precision=Precision(weight_dtype="fp8"), speculation=Speculation(k=3, alpha=0.75),
                                  memory=Memory(gpu_memory_utilization=0.8), sampling=Sampling(priced=True))
    assert flat.to_dict() == grouped.to_dict()
    a = sweep("h100", batch=[1, 8], ctx=[4096], alpha=[0.7], k=[0, 2], drafter="ngram")
    b = sweep(batch=[1, 8], ctx=[4096], k=[0, 2], deployment=Deployment("h100"),
              speculation=Speculation(drafter="ngram", alpha=[0.7]))
    assert a.to_dict() == b.to_dict()
    assert list(a.k) == [0, 2]  # sweep's k is the grid (Speculation.k_values), never the reported draft length


# --- predict and sweep show their options --------------------------------------------------------------------------

@pytest.mark.parametrize("function, positional", [(rooflinesim.predict, PREDICT_POSITIONAL),
                                                  (sweep, SWEEP_POSITIONAL)])
def test_signature_names_every_option(function, positional):
    parameters = inspect.signature(function).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values()), "no option hidden in **options"
    named = _keyword_only(function)
    expected = (set(FLAT_OPTIONS) | set(GROUPS)) - set(positional) - ({"k", "k_values"} if function is sweep else set())
    assert expected <= set(named)
    assert set(positional) <= set(parameters)
    for name in set(FLAT_OPTIONS) - set(positional) - {"sampling", "k", "k_values"}:
        assert named[name].default is DEFAULT  # the default lives in the group, shown by the docstring


@pytest.mark.parametrize("function", [rooflinesim.predict, sweep])
def test_help_shows_each_option_with_its_default(function):
    text = pydoc.render_doc(function, renderer=pydoc.plaintext)
    for name, (group, field_name) in FLAT_OPTIONS.items():
        if function is sweep and name in ("k", "k_values", "hw", "model", "draft", "alpha"):
            continue
        if function is rooflinesim.predict and name in PREDICT_POSITIONAL:
            continue
        cls = GROUPS[group]
        line = f"[{cls.__name__}.{field_name}, default {cls.__dataclass_fields__[field_name].default!r}]"
        assert re.search(rf"\b{name}: .*", text), name
        assert line in " ".join(text.split()), line


def test_build_scenario_takes_options_only_through_the_groups():
    """No option of build_scenario has a default of its own in the signature: a second default could drift."""
    parameters = inspect.signature(build_scenario).parameters
    assert list(parameters) == ["hw", "model", "batch", "ctx", *GROUPS, "assumed", "flat"]
    assert all(p.default in (None, DEFAULT) for p in parameters.values() if p.kind is not p.VAR_KEYWORD)


def test_all_is_unchanged():
    assert rooflinesim.__all__ == ["predict", "Prediction", "InputError", "SpecError", "load_hardware", "load_model",
                                   "list_hardware", "list_models", "HardwareSpec", "ModelSpec", "Workload",
                                   "parse_count"]
