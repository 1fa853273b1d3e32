"""What the learner's kernels do to a whole process, each measured in a fresh Python interpreter: training steps and
checkpoints leave torch._dynamo unimported (daskrl/algo/kernels/eager_optim.py), --learner-kernels off imports no
module of daskrl/algo/kernels/, and a learner process keeps its large freed blocks (daskrl/runtime/memory/heap.py)
instead of faulting them in every step."""

from __future__ import annotations

import sys

import pytest

_NO_DYNAMO = """
import sys
import numpy as np
import gymnasium as gym
from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.config import Config
from daskrl.envs import EnvSpaces
from daskrl.models.actor_critic import build_model

spaces = EnvSpaces.from_spaces(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
rng = np.random.default_rng(0)
batch = TrajectoryBatch(obs=rng.normal(size=(9, 8, 4)).astype(np.float32), actions=rng.integers(0, 2, (8, 8)),
                        rewards=rng.normal(size=(8, 8)).astype(np.float32), dones=np.zeros((8, 8), bool),
                        log_probs=np.full((8, 8), -0.69, np.float32), policy_version=np.zeros((8, 8), np.int64))
for optimizer in ("adam", "adamw", "lamb"):
    cfg = Config().replace(batch_size=32, optimizer=optimizer).learner
    trainer = APPOTrainer(build_model(spaces, Config().model, seed=0), cfg, 0)
    assert trainer.train(batch, 0)["updates"] == 2
    trainer.load_own_state(trainer.own_state())
    trainer.train(batch, 0)
print("torch._dynamo" in sys.modules)
"""


def test_training_steps_and_checkpoints_leave_torch_dynamo_unimported():
    """torch.optim imports torch._dynamo (0.7 s) on an optimizer's first parameter group, state dict and step;
    daskrl/algo/kernels/eager_optim.py keeps the learner's optimizers from it (a torch whose internals moved fails here)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _NO_DYNAMO], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False", "a training step imported torch._dynamo"


_OFF_LOADS_NO_KERNEL = """
import sys
import numpy as np
import gymnasium as gym
from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.algo.dqn.trainer import DQNTrainer
from daskrl.algo.sac.trainer import SACTrainer
from daskrl.config import AlgoConfig, Config, LearnerConfig, ModelConfig
from daskrl.envs import EnvSpaces
from daskrl.models.actor_critic import build_model

box = lambda n: gym.spaces.Box(-np.inf, np.inf, (n,), np.float32)
cartpole = EnvSpaces.from_spaces(box(4), gym.spaces.Discrete(2))
pendulum = EnvSpaces.from_spaces(box(3), gym.spaces.Box(-2, 2, (1,), np.float32))
rng = np.random.default_rng(0)
cfg = Config().replace(batch_size=32, learner_kernels="off")
appo = APPOTrainer(build_model(cartpole, cfg.model, seed=0), cfg.learner, 0)
batch = TrajectoryBatch(obs=rng.normal(size=(9, 8, 4)).astype(np.float32), actions=rng.integers(0, 2, (8, 8)),
                        rewards=rng.normal(size=(8, 8)).astype(np.float32), dones=np.zeros((8, 8), bool),
                        log_probs=np.full((8, 8), -0.69, np.float32), policy_version=np.zeros((8, 8), np.int64))
assert appo.train(batch, 0)["updates"] == 2
off = LearnerConfig(learner_kernels="off")
dqn = DQNTrainer(build_model(cartpole, ModelConfig(), 0), off, AlgoConfig())
sac_model = ModelConfig(action_bounds="squash", gaussian_std="state")
sac = SACTrainer(build_model(pendulum, sac_model, 0), sac_model, off, AlgoConfig(algo="sac", n_step=1))
for trainer, dims, actions in ((dqn, 4, rng.integers(0, 2, 8)), (sac, 3, rng.uniform(-2, 2, (8, 1)).astype(np.float32))):
    data = {"obs": rng.normal(size=(8, dims)).astype(np.float32), "actions": actions,
            "rewards": np.ones(8, np.float32), "next_obs": rng.normal(size=(8, dims)).astype(np.float32),
            "discounts": np.full(8, 0.99, np.float32)}
    assert trainer.train(data, np.ones(8, np.float32))[0]["updates"] == 1
print(sorted(m for m in sys.modules if m.startswith("daskrl.algo.kernels.")))
"""


def test_off_loads_no_kernel_module():
    """A process whose APPO, DQN and SAC trainers train with --learner-kernels off never imports a module of
    daskrl/algo/kernels/ (nor, so, eager_optim's change to torch.optim's wrappers): only 'auto' loads them."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _OFF_LOADS_NO_KERNEL], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


_REFAULTS = """
import ctypes, resource, sys
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "keep":
    from daskrl.runtime.memory.heap import keep_freed_memory
    assert keep_freed_memory()
def faults_of_a_step():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(64 << 20)  # 64 MB: above glibc's largest mmap threshold
    ctypes.memset(block, 1, 64 << 20)
    libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_a_step()
print(min(faults_of_a_step() for _ in range(3)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_a_learner_process_keeps_its_large_freed_blocks_instead_of_faulting_them_in_every_step():
    import subprocess

    faults = {}
    for mode in ("default", "keep"):
        out = subprocess.run([sys.executable, "-c", _REFAULTS, mode], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        faults[mode] = int(out.stdout.split()[-1])
    assert faults["default"] > 10_000, faults  # 64 MB of 4 KB pages mapped afresh
    assert faults["keep"] < faults["default"] / 10, faults
