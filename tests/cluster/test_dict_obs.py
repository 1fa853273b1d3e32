"""Dict observations (packed records, one encoder per key), small images and action masks: the record layout, a
round trip through real trajectory slots (inline and remote inference), masked actions never taken, a too-small
image refused in one line, and runs whose return depends on one key (so losing it would show) training,
checkpointing, resuming, evaluating and recovering from a lost rollout worker."""

from __future__ import annotations

import itertools

import gymnasium as gym
import msgpack
import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.config import Config, ConfigError, ModelConfig
from daskrl.envs import probe_env
from daskrl.envs.layouts.dict_obs import PackedDictObservations, pack_into, read_dict_space, record_size, unpack
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import EnvError
from daskrl.evaluation import enjoy
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.models.actor_critic import build_model, check_model
from daskrl.models.fast_path.numpy_policy import NumpyPolicy
from daskrl.models.inputs.encoders import resolve_encoder_name
from daskrl.monitor.dashboard import DashboardPlugin, dashboard_page
from daskrl.runtime import connect_cluster, dask_internals, spawn
from daskrl.testing.environments.envs import CueEnv
from daskrl.testing.sampling import PolicySource, PolicySourceSetup, sample_slots

from ..helpers import Killer, get_json, recovery_of, run_config, slow

CUE = "daskrl.testing.environments.envs:cue"
LENGTH = 8  # CueEnv's episode length (its best return)
_ids = itertools.count()


def test_a_dict_space_becomes_a_record_of_typed_fields_and_round_trips():
    space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, (5, 4, 3), np.uint8), "pos": gym.spaces.Box(-1, 1, (3,), np.float64),
        "dir": gym.spaces.Discrete(4), "buttons": gym.spaces.MultiDiscrete([2, 3]), "on": gym.spaces.MultiBinary(2),
        "text": gym.spaces.Text(5), "inner": gym.spaces.Dict({"speed": gym.spaces.Box(0, 9, (1,), np.float32)})})
    keys, dropped = read_dict_space(space)
    assert dropped == ("text",)
    kinds = {k.name: k.kind for k in keys}
    assert kinds == {"image": "image", "pos": "box", "dir": "discrete", "buttons": "multi_discrete",
                     "on": "multi_binary", "inner/speed": "box"}
    assert all(k.offset % 4 == 0 for k in keys) and record_size(keys) % 4 == 0
    spans = sorted((k.offset, k.offset + k.nbytes) for k in keys)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), "fields overlap"
    sample = space.sample()
    row = pack_into(np.zeros(record_size(keys), np.uint8), sample, keys)
    back = unpack(row[None], keys)
    np.testing.assert_array_equal(back["image"][0], sample["image"])
    np.testing.assert_allclose(back["pos"][0], sample["pos"].astype(np.float32))
    assert back["dir"][0] == sample["dir"] and list(back["buttons"][0]) == list(sample["buttons"])
    np.testing.assert_allclose(back["inner/speed"][0], sample["inner"]["speed"])
    # --obs-keys keeps those keys only, and refuses a missing or an unstorable one by name
    kept, _ = read_dict_space(space, ["pos", "dir"])
    assert [k.name for k in kept] == ["pos", "dir"] and record_size(kept) == 16
    with pytest.raises(EnvError, match="lack"):
        read_dict_space(space, ["speed"])
    with pytest.raises(EnvError, match=r"\['text'\].*no fixed shape"):
        read_dict_space(space, ["pos", "text"])


class _DictEnv(gym.Env):
    """Observations drawn from ``observation_space`` each step (a fixed seed)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, space: gym.spaces.Dict) -> None:
        self.observation_space = space
        space.seed(0)

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def test_the_env_wrapper_packs_every_kind_of_key_as_pack_into_does():
    """The wrapper writes into fields it viewed once (the per-step path); ``pack_into`` (serving's) slices each time:
    the same bytes for every kind of key, step after step in the one reused row."""
    space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, (5, 4, 3), np.uint8), "pos": gym.spaces.Box(-1, 1, (3,), np.float64),
        "dir": gym.spaces.Discrete(4), "buttons": gym.spaces.MultiDiscrete([2, 3]), "on": gym.spaces.MultiBinary(2),
        "inner": gym.spaces.Dict({"speed": gym.spaces.Box(0, 9, (1,), np.float32)})})
    keys, _ = read_dict_space(space)
    env = PackedDictObservations(_DictEnv(space), keys)
    rows = []
    for _ in range(5):
        raw = space.sample()
        row = env.observation(raw)
        np.testing.assert_array_equal(row, pack_into(np.zeros(record_size(keys), np.uint8), raw, keys))
        rows.append(row.tobytes())
    assert len(set(rows)) == 5  # each step's values, not the first step's kept


def test_action_mask_keys_are_checked():
    spaces = probe_env(CUE, {"masked": True})
    assert EnvSpaces.from_dict(msgpack.unpackb(msgpack.packb(spaces.to_dict()))) == spaces  # as setups carry it
    assert spaces.action_mask_key == "action_mask"
    assert "action_mask" not in [k.name for k in spaces.feature_keys]
    assert spaces.dropped_obs_keys == ("note",)
    with pytest.raises(EnvError, match="no such key"):
        probe_env(CUE, {}, action_mask_key="legal")
    with pytest.raises(EnvError, match="one per action"):
        probe_env(CUE, {}, action_mask_key="clock")
    with pytest.raises(EnvError, match="apply to Dict observations"):
        probe_env("CartPole-v1", {}, obs_keys=["x"])


def test_masked_logits_are_never_sampled_and_keep_the_loss_finite():
    spaces = probe_env(CUE, {"masked": True})
    model = build_model(spaces, ModelConfig(), 0)
    cue = CueEnv(masked=True)
    rows = []
    for seed in range(64):
        obs, _ = cue.reset(seed=seed)
        rows.append(pack_into(np.zeros(spaces.obs_shape, np.uint8), obs, spaces.obs_keys))
    batch = np.stack(rows)
    masks = unpack(batch, spaces.obs_keys)["action_mask"] > 0.5
    for _ in range(50):
        actions, log_probs, _ = model.act(batch)
        assert masks[np.arange(len(actions)), actions].all(), "a masked action was sampled"
        assert np.isfinite(log_probs).all()
    obs = torch.from_numpy(batch)
    log_prob, entropy, value = model.evaluate(obs, torch.from_numpy(actions))
    (log_prob.sum() + entropy.sum() + value.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    forbidden = torch.from_numpy(np.argmin(masks, axis=1))  # a masked action in every row (two of three allowed)
    assert (model.evaluate(obs, forbidden)[0].exp() == 0).all(), "a masked action has a probability"


def test_small_images_get_the_small_cnn_and_a_too_small_image_is_one_readable_line(tmp_path):
    spaces = probe_env(CUE)
    view = next(k for k in spaces.obs_keys if k.name == "view")
    assert view.shape == (3, 3, 1)
    assert resolve_encoder_name("auto", probe_env("daskrl/Catch-v0")) in ("cnn", "small_cnn")
    model = build_model(spaces, ModelConfig(), 0)
    assert type(model.encoder.keyed["view"]).__name__ == "SmallCnnEncoder"
    assert not NumpyPolicy.supports(model), "packed records must not reach the numpy MLP path"
    config = Config.from_flat({"env": CUE, "encoder": "cnn"})
    with pytest.raises(ConfigError) as err:
        check_model(config, spaces)
    message = str(err.value)
    assert "\n" not in message and "36x36" in message and "small_cnn" in message and "'view'" in message
    with pytest.raises(ConfigError, match="small_cnn"):  # before any process starts or file is written
        train(Config.from_flat({"env": CUE, "encoder": "cnn", "dashboard_address": "", "train_dir": str(tmp_path),
                                "experiment": "refused"}))
    assert not (tmp_path / "refused" / "config.json").exists()


@pytest.mark.parametrize("inference", ["inline", "remote"])
def test_dict_records_round_trip_through_trajectory_slots(cluster, inference):
    """Real rollout workers (inline, or with two inference workers) write CueEnv's packed records into their slots;
    what a consumer reads back unpacks into the keys the env produced: the clock counts the steps of each
    episode, the image shows the same count, the cue is one of the actions, and time-limit finals hold the last
    step's observation."""
    hosts = sorted(dask_internals.cluster_workers(cluster.client))
    config = Config.from_flat({
        "env": CUE, "num_workers": 1, "num_envs_per_worker": 4, "rollout": 5, "slots_per_split": 2,
        "worker_num_splits": 2 if inference == "remote" else 1, "inference": inference,
        "num_inference_workers": 2}).validate()
    spaces = probe_env(CUE)
    source = spawn(cluster.client, PolicySource, f"dictsource{next(_ids)}", run_id=cluster.run_id, worker=hosts[0],
                   setup=PolicySourceSetup(spaces, config.model))
    source.call("publish")
    kept = sample_slots(cluster, config, spaces, [source.call("desc")], 12, f"dict{next(_ids)}").kept
    source.call("stop", timeout=30)
    finals = 0
    for s in kept:
        fields = unpack(s["obs"], spaces.obs_keys)  # [T + 1, B, ...]
        steps = np.rint(fields["clock"][..., 0] * LENGTH).astype(int)
        assert ((steps >= 0) & (steps < LENGTH)).all()
        np.testing.assert_array_equal(fields["view"], np.broadcast_to((10 * steps)[..., None, None, None],
                                                                      fields["view"].shape))
        assert set(np.unique(fields["cue"])) <= {0, 1, 2}
        ended = s["truncated"].astype(bool)
        np.testing.assert_array_equal(steps[1:], np.where(ended, 0, steps[:-1] + 1))
        for flat in s["final_at"][s["final_at"] >= 0]:
            t, b = divmod(int(flat), s["obs"].shape[1])
            final = unpack(s["final_obs"][list(s["final_at"]).index(flat)][None], spaces.obs_keys)
            assert np.isclose(final["clock"][0, 0], 1.0), "a time-limit final observation is not the last step's"
            assert steps[t, b] == LENGTH - 1
            finals += 1
    assert finals > 0


#: a CueEnv run on one rollout worker that stops at its first env failure (a masked action raises)
CUE_RUN = {"env": CUE, "num_workers": 1, "num_envs_per_worker": 16, "rollout": 16, "batch_size": 512,
           "report_interval": 0.5, "env_failure_limit": 0}


@slow("trains to a return")
def test_a_masked_dict_run_never_takes_a_masked_action_and_learns_from_the_cue_key(tmp_path):
    """CueEnv raises on a masked action and --env-failure-limit 0 makes that stop the run; the return needs the
    cue key (a policy blind to it averages LENGTH / 2 with the mask's help, which the threshold is well above)."""
    summary = train(run_config(tmp_path, "masked", base=CUE_RUN, env_kwargs={"masked": True},
                               train_for_env_steps=60_000, train_for_seconds=120))
    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    assert not summary["incidents"], summary["incidents"]
    assert summary["episode_return_mean"] >= 0.9 * LENGTH, summary["episode_return_mean"]


@slow("trains to a return, resumes")
def test_a_recurrent_dict_run_checkpoints_resumes_and_enjoys_with_its_memory(tmp_path):
    """The cue shows at the first step only: a GRU over the dict encoder learns it (a feed-forward policy cannot
    beat LENGTH / 3 plus the first step); the checkpoint, a resumed run and ``enjoy`` (state carried per step)
    keep that return."""
    config = run_config(tmp_path, "memory", base=CUE_RUN, env_kwargs={"memory": True}, rnn="gru", rnn_size=32,
                        train_for_env_steps=120_000, train_for_seconds=150)
    first = train(config)
    assert first["episode_return_mean"] >= 0.9 * LENGTH, first["episode_return_mean"]
    store = CheckpointStore(f"{first['experiment_dir']}/checkpoints")
    saved = store.load("latest")
    assert any(k.startswith("encoder.keyed.view.") for k in saved["model"]), "the image key's encoder is missing"
    played = enjoy(first["experiment_dir"], episodes=10)
    assert played["return_mean"] >= 0.9 * LENGTH, played
    second = train(run_config(tmp_path, "memory", base=CUE_RUN, env_kwargs={"memory": True}, rnn="gru", rnn_size=32,
                              resume=True, train_for_env_steps=140_000, train_for_seconds=150))
    assert second["env_steps"] >= 140_000 and store.load("latest")["train_steps"] > saved["train_steps"]
    assert second["episode_return_mean"] >= 0.9 * LENGTH, second["episode_return_mean"]


@slow("a SIGKILL drill")
def test_a_recurrent_dict_run_recovers_a_lost_rollout_worker_and_the_dashboard_shows_its_return(tmp_path):
    """SIGKILL of the only rollout worker of a GRU policy on the memory task: the recreated worker starts its envs
    and states afresh, the run reaches its budget with the return it had (a state or key lost after the recovery
    would drop it to about LENGTH / 3), and the dashboard's history of the run shows the same returns."""
    session = connect_cluster(n_workers=2, dashboard_address="127.0.0.1:0", scheduler_plugins=(DashboardPlugin(),))
    try:
        base = dashboard_page(session.client)[: -len("/daskrl")]
        killer = Killer("rollout_0", ready=lambda row: row["env_steps"] >= 40_000)
        summary = train(run_config(tmp_path, "lost", base=CUE_RUN, env_kwargs={"memory": True}, rnn="gru", rnn_size=32,
                                   train_for_env_steps=160_000, train_for_seconds=150),
                        client=session.client, on_report=killer)
        killer.check()
        rows = get_json(f"{base}/daskrl/api/history?run=lost")["rows"]
    finally:
        session.close()
    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    assert recovery_of(summary, "rollout_0")["role"] == "rollout"
    assert summary["episode_return_mean"] >= 0.9 * LENGTH, summary["episode_return_mean"]
    after = rows[killer.rows_before_kill:]
    assert len(after) >= 2 and after[-1]["env_steps"] == summary["env_steps"]
    assert after[-1]["episode_return_mean"] >= 0.9 * LENGTH, after[-1]


@slow("trains MiniGrid")
def test_minigrid_trains_from_its_gymnasium_module_id(tmp_path):
    """A third-party Dict-observation env as a user names it (gymnasium's ``module:EnvId`` form): MiniGrid's
    ``image`` (7x7x3, the small CNN) and ``direction`` keys are kept, ``mission`` (Text) dropped, and the return
    rises well above where it starts."""
    pytest.importorskip("minigrid", reason="the minigrid extra is not installed (pip install 'daskrl[minigrid]')")
    env = "minigrid:MiniGrid-Empty-5x5-v0"
    spaces = probe_env(env)
    assert [k.name for k in spaces.obs_keys] == ["direction", "image"] and spaces.dropped_obs_keys == ("mission",)
    rows: list[dict] = []
    # 35k env steps: alone here the mean return went from 0.26 (its lowest once 100 episodes had ended) past 0.56 at
    # 20k and to 0.83 at 35k (0.90 at 60k)
    summary = train(Config.from_flat({"env": env, "train_dir": str(tmp_path), "experiment": "minigrid",
                                      "train_for_env_steps": 35_000, "train_for_seconds": 150,
                                      "report_interval": 1.0, "dashboard_address": ""}), on_report=rows.append)
    # the first reports are biased to the short (successful) episodes of the first policy: the bar is the lowest
    # mean once 100 episodes have ended (the untrained policy's)
    returns = [r["episode_return_mean"] for r in rows if r["episodes"] >= 100]
    assert summary["env_steps"] >= 35_000
    assert returns and summary["episode_return_mean"] >= min(returns) + 0.3, (min(returns), summary)


def test_auto_precision_takes_bfloat16_for_large_image_keys_only():
    """--inference-precision auto: a Dict whose image key the Nature CNN encodes samples in bfloat16 where the CPU
    has it (as a plain image env does); small views (MiniGrid's, CueEnv's 3x3) stay float32."""
    from daskrl.sampling.policies.policy import cpu_has_native_bfloat16, resolve_precision

    big = EnvSpaces.from_spaces(gym.spaces.Dict({"screen": gym.spaces.Box(0, 255, (72, 128, 3), np.uint8),
                                                 "health": gym.spaces.Box(0, 100, (1,), np.float32)}),
                                gym.spaces.Discrete(3))
    assert resolve_precision("auto", big) == ("bfloat16" if cpu_has_native_bfloat16() else "float32")
    assert resolve_precision("auto", probe_env(CUE)) == "float32"
