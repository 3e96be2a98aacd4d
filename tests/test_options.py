"""Options defined once (``registry.options``): the command line's defaults, the Python API's keyword defaults and
the pipeline's settings all agree with the dataclasses, for every option they share."""

from __future__ import annotations

import dataclasses
import inspect

import click
import pytest

from registry import api
from registry.cli.serve import serve
from registry.cli.transfer import transfer
from registry.cli.tune import tune
from registry.errors import BadInputError
from registry.options import SERVE, TRANSFER, TUNE, TransferOptions, duration_text, size_text

# Options spelled differently on the command line: (the click parameter, how its default maps to the field's).
INVERTED = {"measure": ("no_measure", lambda no_measure: not no_measure)}
# A click default and an API default that mean the same: this machine's target; no input shape fixed.
SAME_MEANING = {"target": ("host", None), "input_shapes": ((), None)}


def click_defaults(command: click.Command) -> dict:
    """Each parameter's value as the command receives it when the command line gives none: its default converted by
    its type (``"5m"`` -> 300.0), None where it has none."""
    return command.make_context(command.name, [], resilient_parsing=True).params


def api_defaults(function) -> dict:
    return {
        name: p.default
        for name, p in inspect.signature(function).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def field_defaults(options) -> dict:
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}


def disagreements(fields: dict, others: dict) -> list[str]:
    """The fields whose default ``others`` gives differently (a field ``others`` lacks is not compared)."""
    found = []
    for name, default in fields.items():
        key, seen = INVERTED.get(name, (name, lambda value: value))
        if key in others and seen(others[key]) != default:
            found.append(f"{name}: {default!r} in registry.options, {others[key]!r} as {key}")
    return found


@pytest.mark.parametrize(
    ("options", "command", "function"),
    [(TUNE, tune, api.tune_models), (TRANSFER, transfer, api.transfer)],
    ids=["tune", "transfer"],
)
def test_click_and_api_defaults_are_the_dataclass_defaults(options, command, function) -> None:
    fields = field_defaults(options)
    assert disagreements(fields, click_defaults(command)) == []
    assert disagreements(fields, api_defaults(function)) == []
    # every field is an option of both: none is defined only in the dataclass
    for name in fields:
        assert INVERTED.get(name, (name,))[0] in click_defaults(command), name
        assert name in api_defaults(function), name


@pytest.mark.parametrize(
    ("command", "function"), [(tune, api.tune_models), (transfer, api.transfer)], ids=["tune", "transfer"]
)
def test_options_beside_the_dataclasses_agree_between_click_and_api(command, function) -> None:
    """The options every model command shares (--threads, --exact-math, --team, ...) default alike in both."""
    on_line, in_api = click_defaults(command), api_defaults(function)
    shared = sorted(set(on_line) & set(in_api))
    assert {"threads", "exact_math", "team", "rpc", "dop", "target"} <= set(shared)
    for name in shared:
        if name in SAME_MEANING:
            assert (on_line[name], in_api[name]) == SAME_MEANING[name], name
        else:
            assert on_line[name] == in_api[name], name


def test_serve_defaults_are_the_dataclass_defaults() -> None:
    fields = field_defaults(SERVE)
    on_line = click_defaults(serve)
    assert disagreements(fields, on_line) == []
    assert set(fields) <= set(on_line)


def test_serve_config_agrees_where_the_server_has_a_default_of_its_own() -> None:
    from registry.server.app import ServeConfig

    config = ServeConfig()
    server = (config.public, config.rate, config.max_upload, config.max_header)
    assert server == (SERVE.public, SERVE.rate_limit, SERVE.max_upload, SERVE.max_header)


def test_help_shows_the_defaults_as_a_user_writes_them() -> None:
    assert duration_text(TUNE.lease) == "5m"
    assert duration_text(TRANSFER.tune_budget) == "3m"
    assert duration_text(90) == "1m30s"
    assert (size_text(SERVE.max_upload), size_text(SERVE.max_header)) == ("256MB", "32KiB")
    assert size_text(1000 * 1024 + 1) == str(1000 * 1024 + 1)


def test_the_api_refuses_a_plateau_or_lease_out_of_range() -> None:
    for bad in ({"plateau": 0}, {"plateau": 1.5}, {"lease": 0}, {"lease": 2 * 24 * 3600}, {"lease": "5m"}):
        with pytest.raises(BadInputError, match=next(iter(bad))):
            api.tune_models([], **bad)


def test_a_device_applies_only_to_the_pipeline_that_measures_nothing() -> None:
    assert TransferOptions(measure=False, device="xeon").device == "xeon"
    with pytest.raises(BadInputError, match="measure=False"):
        TransferOptions(device="xeon")


def test_the_pipeline_settings_derive_from_the_dataclasses() -> None:
    pytest.importorskip("tvm")
    from registry.pipeline.effort import Leases
    from registry.pipeline.model_run import Where
    from registry.pipeline.predicted import PredictOptions
    from registry.pipeline.transfer import ModelTransferOptions
    from registry.pipeline.tune import ModelTuneOptions

    assert ModelTuneOptions.of(TUNE, team=None, output=None, where=Where()) == ModelTuneOptions()
    transfer_settings = ModelTransferOptions()
    assert (
        transfer_settings.candidates,
        transfer_settings.neighbours,
        transfer_settings.tune_trials,
        transfer_settings.tune_seconds,
        transfer_settings.retune_below,
    ) == (TRANSFER.per_task, TRANSFER.neighbours, TRANSFER.tune_trials, TRANSFER.tune_budget, TRANSFER.retune_below)
    predict = PredictOptions()
    assert (predict.candidates, predict.neighbours) == (TransferOptions(measure=False).per_task, TRANSFER.neighbours)
    leases = Leases(store=None, device_id=0)
    assert (leases.window, leases.lease_s, leases.retune) == (TUNE.plateau, TUNE.lease, TUNE.retune)
