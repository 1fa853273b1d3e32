"""A module that registers a model component on import, named by --env-packages (tests/drills/test_env_packages.py)."""

from torch import nn

from daskrl.models import register_encoder


class PackagedEncoder(nn.Module):
    def __init__(self, spaces) -> None:
        super().__init__()
        self.packaged = nn.Linear(spaces.obs_dim, 8)
        self.out_dim = 8

    def forward(self, obs):
        return self.packaged(obs.reshape(obs.shape[0], -1).float())


register_encoder("test_packaged", PackagedEncoder)
