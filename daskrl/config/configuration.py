"""The whole configuration of a run: the eight option sections (:mod:`.options`), flat access by option name, JSON,
and ``validate()``, which checks every value and the options that must fit together before any process starts and
reports all problems at once, one readable line each.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import typing
from dataclasses import dataclass, field
from typing import Any

from daskrl.config.checks import check_field
from daskrl.config.deploy_options import DeployConfig
from daskrl.config.options import (
    SECTIONS,
    AlgoConfig,
    EnvConfig,
    LearnerConfig,
    ModelConfig,
    PolicyConfig,
    RunConfig,
    SamplerConfig,
)
from daskrl.config.rules import cross_option_problems
from daskrl.errors import ConfigError


@dataclass
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    policies: PolicyConfig = field(default_factory=PolicyConfig)
    run: RunConfig = field(default_factory=RunConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)

    # ---- by option name: config.explicit(), config.flat(), Config.from_flat({...}), config.replace(rollout=64) ----

    def explicit(self) -> set[str]:
        """Names of the options that were set, rather than left at their defaults."""
        return set().union(*(getattr(self, section).explicit() for section in SECTIONS))

    def flat(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for section in SECTIONS:
            out.update(dataclasses.asdict(getattr(self, section)))
        return out

    @classmethod
    def from_flat(cls, values: dict[str, Any]) -> Config:
        """Build from a flat dict of option names; unknown names raise with a suggestion."""
        return cls().replace(**values)

    def replace(self, **values: Any) -> Config:
        """A copy with these options set (and counted as set: see :class:`Section`)."""
        known = {f.name: s for s, c in SECTIONS.items() for f in dataclasses.fields(c)}
        unknown = [k for k in values if k not in known]
        if unknown:
            hints = [f"{k!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, known, 1)) else "")
                     for k in unknown]
            raise ConfigError([f"unknown option {h}" for h in hints])
        cfg = copy.deepcopy(self)
        for key, value in values.items():
            setattr(getattr(cfg, known[key]), key, value)
        return cfg

    def to_json(self) -> str:
        return json.dumps({s: dataclasses.asdict(getattr(self, s)) for s in SECTIONS}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Config:
        data = json.loads(text)
        flat = {k: v for section in data.values() for k, v in section.items()}
        return cls.from_flat(flat)

    @property
    def experiment_dir(self) -> str:
        return os.path.join(self.run.train_dir, self.run.experiment)

    def validate(self) -> Config:
        """Raise :class:`ConfigError` listing every problem (one line each); return self when all is well."""
        self.policies.apply_opponent_defaults()  # the checks below count the policies and snapshots
        found = {f.name: problem for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
                 if (problem := check_field(f, typing.get_type_hints(cls)[f.name],
                                            getattr(getattr(self, section), f.name)))}
        problems = list(found.values()) + cross_option_problems(self, found)
        if problems:
            raise ConfigError(problems)
        return self
