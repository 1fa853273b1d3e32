"""A resumed run trains the network its checkpoints hold: the model options a ``--resume`` leaves out are the ones
the experiment trained with (its ``config.json``), and one it gives that would build another network is refused.

Why: defaults move (between versions, per ``--algo``, per env family), and a resume built from today's defaults
could build another network than the one trained; the learner then failed to load the checkpoint, late and with a
``state_dict`` error, not a fix. Sample Factory's resume reads its saved config the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from daskrl.config import Config, ModelConfig, flag
from daskrl.config.checks import as_option
from daskrl.errors import ConfigError

#: options added after runs were saved: the value that builds the network such a run trained
BEFORE_THE_OPTION: dict[str, Any] = {"value_encoder": "auto"}
#: model options a resume may change: they set a starting value only, which the checkpoint then replaces
STARTING_VALUES_ONLY = frozenset({"init_log_std"})


def trained_model_options(experiment_dir: str) -> dict[str, Any] | None:
    """The model options of the experiment's ``config.json`` (None where there is no such file), with the values of
    options it predates filled in."""
    path = os.path.join(experiment_dir, "config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        saved = json.load(f).get("model", {})
    return {f.name: saved.get(f.name, BEFORE_THE_OPTION.get(f.name, getattr(ModelConfig(), f.name)))
            for f in dataclasses.fields(ModelConfig)}


def adopt_trained_network(config: Config) -> dict[str, Any]:
    """Under ``--resume``, set each model option the user left out to the experiment's trained value, counted as
    given (so no family or algorithm default replaces it later); returns those that changed. Raises one
    :class:`ConfigError` naming every given option that differs from the trained network's."""
    trained = trained_model_options(config.experiment_dir) if config.run.resume else None
    if trained is None:
        return {}
    explicit, adopted, refused = config.explicit(), {}, []
    for name, value in trained.items():
        now = getattr(config.model, name)
        if now == value or name in STARTING_VALUES_ONLY:
            continue
        if name in explicit:
            refused.append(f"--resume: {_shown(name, now)} builds another network than experiment "
                           f"{config.experiment_dir!r} trained ({_shown(name, value)} in its config.json): leave "
                           f"{flag(name)} out to continue it, or train a new experiment")
        else:
            setattr(config.model, name, value)
            adopted[name] = value
    if refused:
        raise ConfigError(refused)
    return adopted


def _shown(name: str, value: Any) -> str:
    return f"{flag(name)} '{json.dumps(value)}'" if isinstance(value, dict) else as_option(name, value)
