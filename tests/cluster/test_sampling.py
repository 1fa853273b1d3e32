"""The sampling engine on a real LocalCluster with worker processes: rollout workers writing trajectory slots,
inline and remote inference, policy versions, Box and image envs, sampling-only runs, and fail-fast config.

Slots are read by a real consumer (:class:`daskrl.testing.sampling.SlotCollector`) that copies each slot when
``trajectory_ready`` arrives, poisons it and hands it back, exactly where the learner would stand.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np
import psutil
import pytest

from daskrl import train
from daskrl.config import Config, ConfigError, ModelConfig
from daskrl.driver.fleet.role_setups import role_setups
from daskrl.envs import EnvError, probe_env
from daskrl.protocol import policy_queue, wire_rollout, wire_sampling_graph
from daskrl.runtime import connect_cluster, dask_internals, spawn, spawn_all
from daskrl.runtime.memory.shm import SHM_DIR, list_segments, owner_pid
from daskrl.sampling.episode import episodes_from_event
from daskrl.sampling.inference_worker import InferenceWorker
from daskrl.sampling.rollout_worker import RolloutWorker
from daskrl.setups import RolloutSetup
from daskrl.testing.sampling import (
    CollectorSetup,
    PolicySource,
    PolicySourceSetup,
    SlotCollector,
    expected_log_probs,
)

from ..helpers import set_worker_env, split_chains, wait_for

COUNTING = "daskrl/Counting-v0"
EPISODE = 5  # Counting episode length: not a multiple of the rollouts below, so episodes straddle slots
CATCH_EPISODE = 19  # Catch: the ball reaches the paddle row after 19 steps
PENDULUM_EPISODE = 200  # Pendulum-v1's time limit

_ids = itertools.count()


# ---- fixtures and helpers ----


def spawn_one(cluster, cls, worker, setup):
    return spawn(cluster.client, cls, f"{cls.__name__.lower()}{next(_ids)}", run_id=cluster.run_id, worker=worker,
                 setup=setup)


def stop_quietly(*handles):
    for h in handles:
        try:
            h.call("stop", timeout=30)
        except Exception:
            pass


def wait_for_more_slots(collector, n):
    def seen():
        return sum(collector.call("stats")["seen"].values())

    target = seen() + n
    wait_for(lambda: seen() >= target, what=f"{n} more slots")


def worker_processes():
    """Live descendants of this process, less multiprocessing's long-lived helpers (the forkserver that
    embedded workers are forked from, the resource tracker): the processes a cluster start leaves."""
    me, out = os.getpid(), set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            helper = p.ppid() == me and any(h in " ".join(p.cmdline()) for h in ("forkserver", "resource_tracker"))
        except psutil.Error:  # gone meanwhile
            continue
        if not helper:
            out.add(p.pid)
    return out


def rollout_setup(env, *, num_envs, num_splits, rollout, slots_per_split=2, env_kwargs=None, params=None, seed=0,
                  inference_precision="auto") -> RolloutSetup:
    """An inline rollout worker's setup, made the way a run makes it (from a Config, by role_setups)."""
    config = Config.from_flat({
        "env": env, "env_kwargs": env_kwargs or {}, "num_workers": 1, "num_envs_per_worker": num_envs,
        "worker_num_splits": num_splits, "rollout": rollout, "slots_per_split": slots_per_split, "seed": seed,
        "inference_precision": inference_precision}).validate()
    return role_setups(config, probe_env(env, env_kwargs), [params]).rollout[0]


def run_inline(cluster, hosts, env, *, slots, env_kwargs=None, params_source=None, during=None, max_keep=None,
               **cfg):
    """One inline rollout worker feeding a SlotCollector until ``slots`` slots were kept (and, when
    ``during(rollout, collector)`` is given, until 4 more arrived after it returned); returns (kept slots in
    arrival order, rollout stats at stop)."""
    params = params_source.call("desc") if params_source is not None else None
    rollout = spawn_one(cluster, RolloutWorker, hosts[0], rollout_setup(env, env_kwargs=env_kwargs, params=params,
                                                                        **cfg))
    collector = spawn_one(cluster, SlotCollector, hosts[1], CollectorSetup(max_keep=max_keep or slots))
    try:
        wire_rollout(cluster.client, rollout, [collector.on_trajectory])
        collector.call("attach_workers", {rollout.name: rollout.call("buffers")})
        collector.call("start")
        rollout.call("start")
        if during is not None:
            during(rollout, collector)
            # counted as seen: a fast sampler may have filled the collector's max_keep before this
            wait_for_more_slots(collector, 4)
        wait_for(lambda: collector.call("stats")["kept"] >= slots, what=f"{slots} slots from {env}")
        rollout_stats = rollout.call("stop", timeout=30)
        kept = collector.call("collected")
        collector_stats = collector.call("stop", timeout=30)
    finally:
        stop_quietly(rollout, collector)
    assert rollout_stats["error_count"] == 0, rollout_stats["errors"]
    assert collector_stats["error_count"] == 0, collector_stats["errors"]
    assert all(k["worker"] == rollout.name for k in kept)
    return [k["arrays"] | {"frames": k["frames"]} for k in kept], rollout_stats


def check_counting_chain(chain, rollout, episode_length):
    """The whole bookkeeping of one split's consecutive slots on the deterministic Counting env."""
    first = chain[0]["obs"][0]
    e0 = first[:, 2]
    assert np.all(e0 == e0[0]), "the envs of a split are reset together at start"
    prev_action = None
    for k, s in enumerate(chain):
        obs, actions = s["obs"], s["actions"]
        T, B = actions.shape
        assert T == rollout and obs.shape == (T + 1, B, 3) and s["frames"] == T * B
        if k:
            np.testing.assert_array_equal(obs[0], chain[k - 1]["obs"][T], err_msg=f"slot {k} obs[0] != slot {k - 1} obs[T]")
        assert set(np.unique(actions).tolist()) <= {0, 1, 2}, f"slot {k}: actions {np.unique(actions)}"
        g = k * T + np.arange(T + 1)  # step index since the start, for obs 0..T of this slot
        step = g % episode_length
        np.testing.assert_array_equal(obs[:, :, 0], np.repeat(step[:, None], B, 1), err_msg=f"slot {k}: step_in_episode")
        np.testing.assert_array_equal(obs[:, :, 2], e0[None, :] + (g // episode_length)[:, None],
                                      err_msg=f"slot {k}: episode_index")
        last = np.concatenate([(prev_action if prev_action is not None else np.full((1, B), -1)), actions])
        expected_last = np.where(step[:, None] == 0, -1, last)
        np.testing.assert_array_equal(obs[:, :, 1], expected_last, err_msg=f"slot {k}: last_action != previous action")
        ends = ((g[:-1] + 1) % episode_length == 0)[:, None]
        np.testing.assert_array_equal(s["terminated"], np.repeat(ends, B, 1).astype(np.uint8),
                                      err_msg=f"slot {k}: terminated flags")
        assert not s["truncated"].any(), f"slot {k}: truncated set on a env without time limit"
        expected_reward = (actions == (g[:-1] % episode_length % 3)[:, None]).astype(np.float32)
        np.testing.assert_array_equal(s["rewards"], expected_reward, err_msg=f"slot {k}: rewards")
        prev_action = actions[-1:]


def check_complete(s, what):
    """Nothing of the slot was left unwritten (the collector poisons slots before handing them back)."""
    lp = s["log_probs"]
    assert np.all(np.isfinite(lp)) and np.all(lp < 0), f"{what}: unwritten log_probs {lp[~(lp < 0)]}"
    for name in ("obs", "rewards"):
        assert np.all(np.isfinite(s[name])), f"{what}: {name} has unwritten (NaN) entries"
    assert np.all(s["policy_version"] >= 0), f"{what}: unwritten policy_version {s['policy_version']}"
    for name in ("terminated", "truncated"):
        assert set(np.unique(s[name]).tolist()) <= {0, 1}, f"{what}: {name} holds {np.unique(s[name])}"


def check_versions(chain, what):
    """Versions never go back within a split (that each step acted with the version it records, check_log_probs
    tells)."""
    versions = np.concatenate([s["policy_version"] for s in chain])
    assert np.all(np.diff(versions) >= 0), f"{what}: policy_version went back: {versions.tolist()}"
    return versions


def check_log_probs(slots, spaces, model, what, precision="float32", actor_scale=1.0, on=None):
    """Steps at a published version (>= 1) carry the log-prob of their action under the policy of the version they
    record, for their own observation (the PolicySource publishes its seed-0 network, action head times
    ``actor_scale``, each version's first action output moved: a step acted by another version shows), computed in
    the ``precision`` the sampler reported; ``on`` = (client, worker address) computes the expected values in that
    worker's process."""
    obs = np.concatenate([s["obs"][:-1] for s in slots])
    actions = np.concatenate([s["actions"] for s in slots])
    log_probs = np.concatenate([s["log_probs"] for s in slots])
    versions = np.concatenate([s["policy_version"] for s in slots])
    published = versions >= 1
    assert published.any(), f"{what}: no step was sampled with a published version"
    args = (spaces, model, precision, actor_scale, obs, actions, versions)
    if on is None:
        expected = expected_log_probs(*args)
    else:
        client, worker = on
        expected = client.submit(expected_log_probs, *args, workers=[worker], pure=False).result(timeout=60)
    np.testing.assert_allclose(log_probs[published], expected[published], atol=1e-5, rtol=1e-5,
                               err_msg=f"{what}: log-probs do not match the step's observation and action")


def our_segments(cluster):
    """daskrl segments on this host owned by this cluster's worker processes (any run)."""
    pids = set(cluster.client.run(os.getpid).values())
    return [n for n in list_segments() if owner_pid(n) in pids]


class ChildWatch:
    """Watches for new worker processes (a cluster starting) while the block runs."""

    def __init__(self) -> None:
        self.before = worker_processes()
        self.new: set[int] = set()
        self._done = threading.Event()

    def _poll(self) -> None:
        while not self._done.is_set():
            try:
                self.new |= worker_processes() - self.before
            except psutil.Error:
                pass
            self._done.wait(0.01)

    def __enter__(self) -> ChildWatch:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


# ---- 5. bad configurations fail fast, before any process starts (no cluster needed: run first) ----


def test_bad_env_id_fails_fast_naming_the_close_match(tmp_path):
    config = Config.from_flat({"env": "CartPol-v1", "train_dir": str(tmp_path), "dashboard_address": "",
                               "sampling_only": True, "train_for_env_steps": 1000})
    t0 = time.monotonic()
    with ChildWatch() as watch, pytest.raises(EnvError, match=r"CartPol-v1.*did you mean 'CartPole-v1'"):
        train(config)
    assert not watch.new, f"train() started processes {watch.new} before rejecting the env"
    assert time.monotonic() - t0 < 10
    assert os.listdir(tmp_path) == [], "nothing should be written for a run that cannot start"


def test_splits_that_do_not_divide_the_envs_fail_fast(tmp_path):
    config = Config.from_flat({"env": COUNTING, "num_envs_per_worker": 10, "worker_num_splits": 3,
                               "train_dir": str(tmp_path), "dashboard_address": "", "sampling_only": True})
    t0 = time.monotonic()
    with ChildWatch() as watch, pytest.raises(ConfigError) as err:
        train(config)
    assert not watch.new, f"train() started processes {watch.new} before rejecting the config"
    assert time.monotonic() - t0 < 10
    message = str(err.value)
    assert "--worker-num-splits 3" in message and "--num-envs-per-worker 10" in message, message
    assert "does not divide" in message and len(err.value.problems) == 1, message
    assert os.listdir(tmp_path) == []


def test_automatic_splits_double_buffer_remote_inference_only():
    def splits(**values) -> int:
        return Config.from_flat(values).validate().sampler.num_splits()

    assert splits(inference="inline") == 1  # one thread steps and acts: a second group would only halve the batch
    assert splits(inference="remote") == 2
    assert splits(inference="remote", num_envs_per_worker=5) == 1  # 2 would not divide
    assert splits(inference="inline", worker_num_splits=4) == 4  # a number given is used as is
    with pytest.raises(ConfigError, match="--worker-num-splits must be >= 0"):
        splits(worker_num_splits=-1)


# ---- 1. trajectory bookkeeping on the deterministic env, inline inference ----


def test_inline_slots_chain_across_boundaries_with_exact_bookkeeping(cluster, hosts):
    rollout = 4  # episode length 5: every slot boundary cuts some episode, terminations move through the slot
    collected: list = []

    def observe(rollout_worker, collector):
        """Observers read stats freely; only collect() (the runner's call) takes the finished episodes."""
        wait_for(lambda: collector.call("stats")["kept"] >= 10, what="10 slots")
        for _ in range(2):
            assert "episodes" not in rollout_worker.call("stats")
        collected.extend(rollout_worker.call("collect")["episodes"])
        # episodes that end after collect() come in stop()'s last word: 4 more slots a split (16 steps an env, more
        # than 3 episodes) filled after it, counted by the sampler (the collector's count may lag behind it)
        filled = rollout_worker.call("stats")["slots_filled"]
        wait_for(lambda: rollout_worker.call("stats")["slots_filled"] >= filled + 8, what="8 more slots filled")

    slots, stats = run_inline(cluster, hosts, COUNTING, slots=40, env_kwargs={"episode_length": EPISODE},
                              num_envs=4, num_splits=2, rollout=rollout, slots_per_split=2, during=observe,
                              max_keep=100)
    chains = split_chains(slots, num_splits=2)
    for i, chain in enumerate(chains):
        assert len(chain) >= EPISODE, f"split chain {i} has only {len(chain)} slots"
        check_counting_chain(chain, rollout, EPISODE)
        assert any(s["obs"][0, 0, 0] > 0 for s in chain), "no episode straddled two slots"
        assert any(s["terminated"][0].all() for s in chain[1:]), "no episode ended on a slot's first step"
        for s in chain:
            check_complete(s, f"split {i}")
            assert np.all(s["policy_version"] == 0), "no parameters were published: every step is version 0"
    filled, per_split = stats["slots_filled"], 2
    assert filled >= 40
    # every env step lies in a filled slot or in one of the 2 splits' slots in progress
    assert filled * rollout * per_split <= stats["env_steps"] <= (filled + 2) * rollout * per_split
    # what collect() took, then the rest in stop()'s last word (both in their wire form: plain tuples)
    episodes = episodes_from_event(collected + stats["episodes"])
    assert collected and stats["episodes"] and all(e.length == EPISODE for e in episodes)
    # each episode reported once: every env step lies in a reported episode or in one env's unfinished one
    assert stats["env_steps"] - 4 * (EPISODE - 1) <= len(episodes) * EPISODE <= stats["env_steps"]


def test_a_split_takes_the_slot_freed_last_so_slots_never_needed_at_once_stay_unwritten(cluster, hosts):
    """A rollout worker takes the most recently freed slot: with a consumer that hands each slot back at once, its
    split cycles through a few of its 16 slots, and the others' shared memory is never allocated (tmpfs allocates a
    page at its first write). Taking the slots in turn wrote every one of them within the first 16 slots."""
    measured = {}

    def during(rollout_worker, collector):
        wait_for_more_slots(collector, 48)  # three times around the 16 slots, had they been taken in turn
        desc = rollout_worker.call("buffers")["obs"]  # [slots, rollout + 1, envs, 4] float32: 33 KB a slot
        st = os.stat(os.path.join(SHM_DIR, desc["name"]))
        measured.update(size=st.st_size, allocated=st.st_blocks * 512)

    run_inline(cluster, hosts, "CartPole-v1", slots=1, num_envs=32, num_splits=1, rollout=64, slots_per_split=16,
               during=during, max_keep=1)
    assert measured["allocated"] <= measured["size"] // 2, measured


# ---- 2. every step records the policy version it was sampled with ----


def test_inline_steps_record_the_version_that_chose_them(cluster, hosts):
    spaces = probe_env(COUNTING, {"episode_length": EPISODE})
    source = spawn_one(cluster, PolicySource, hosts[2], PolicySourceSetup(spaces))
    published = []

    def publish_while_sampling(rollout, collector):
        for _ in range(6):  # a new version each time a few more slots came in, however busy the machine is
            wait_for_more_slots(collector, 3)
            published.append(source.call("publish"))
        wait_for(lambda: rollout.call("stats")["policy_version"] == published[-1], timeout=20,
                 what="the rollout worker picking up the last version")

    try:
        slots, stats = run_inline(cluster, hosts, COUNTING, slots=10, max_keep=50_000, params_source=source,
                                  during=publish_while_sampling, env_kwargs={"episode_length": EPISODE},
                                  num_envs=4, num_splits=2, rollout=16, slots_per_split=2)
    finally:
        stop_quietly(source)
    assert published == [1, 2, 3, 4, 5, 6]
    assert len(slots) < 50_000, "the collector's cap cut the run short"
    for i, chain in enumerate(split_chains(slots, num_splits=2)):
        check_counting_chain(chain, 16, EPISODE)
        for s in chain:
            check_complete(s, f"split {i}")
        versions = check_versions(chain, f"split {i}")
        assert versions[0] < versions[-1] == published[-1], f"split {i}: versions {np.unique(versions)}"
        assert len(np.unique(versions)) >= 3, f"split {i} saw only versions {np.unique(versions)}"
        check_log_probs(chain, spaces, ModelConfig(), f"split {i}")
    assert stats["policy_version"] == published[-1]


# ---- 3. remote inference: 2 rollout workers x 2 splits, 2 inference workers, no request lost ----


def test_remote_inference_serves_every_request_and_fills_every_step(cluster, hosts):
    rollout, per_split = 8, 2
    config = Config.from_flat({
        "env": COUNTING, "env_kwargs": {"episode_length": EPISODE}, "num_workers": 2, "num_envs_per_worker": 4,
        "worker_num_splits": 2, "rollout": rollout, "slots_per_split": 2, "inference": "remote",
        "num_inference_workers": 2,
    }).validate()
    spaces = probe_env(COUNTING, config.env.env_kwargs)
    source = spawn_one(cluster, PolicySource, hosts[0], PolicySourceSetup(spaces, config.model))
    collector = spawn_one(cluster, SlotCollector, hosts[2], CollectorSetup())
    # the graph a run builds (Fleet.create), with the collector where the learner would stand
    setups = role_setups(config, spaces, [source.call("desc")])
    name = f"remote{next(_ids)}"
    rollout_handles, inference_handles = [], []
    try:
        spawn_all(cluster.client, [(RolloutWorker, f"{name}_rollout_{i}", host, setup)
                                   for i, (host, setup) in enumerate(zip(hosts[:2], setups.rollout, strict=True))],
                  run_id=cluster.run_id, created=rollout_handles)
        buffers = {h.name: h.call("buffers") for h in rollout_handles}
        spawn_all(cluster.client, [(InferenceWorker, f"{name}_inference_{j}", host, setups.inference[0])
                                   for j, host in enumerate([hosts[2], hosts[0]])],
                  run_id=cluster.run_id, created=inference_handles)
        for handle in inference_handles:
            handle.call("attach_workers", buffers)
        wire_sampling_graph(cluster.client, rollout_handles, inference_handles, [collector.on_trajectory],
                            policy_queue(0))
        assert sorted(collector.call("attach_workers", buffers)) == sorted(buffers)
        for handle in [collector, *inference_handles, *rollout_handles]:
            handle.call("start")
        published = []
        for _ in range(5):
            wait_for_more_slots(collector, 4)
            published.append(source.call("publish"))
        wait_for_more_slots(collector, 8)  # more than the 4 splits can have had in progress at the last publish
        # stop handing slots back: every split fills what it has, then waits; nothing may stay in flight
        collector.call("hold", True)

        def at_rest():
            stats = [h.call("stats") for h in rollout_handles]
            return all(s["waiting_splits"] == 2 and s["free_slots"] == 0 for s in stats) and stats

        rollout_stats = wait_for(at_rest, timeout=30, what="every split waiting for a free slot (a lost request "
                                                           "leaves its split stuck)")
        steps = sum(s["env_steps"] for s in rollout_stats)

        def all_served():  # an inference worker counts a batch just after answering it
            stats = [h.call("stats") for h in inference_handles]
            return stats if sum(s["requests"] for s in stats) * per_split >= steps else None

        inference_stats = wait_for(all_served, timeout=10, what=f"requests served for {steps} env steps")
        collector_stats = collector.call("stats")
        kept = collector.call("collected")
    finally:
        stats_at_stop = [h.call("stop", timeout=30) for h in rollout_handles + inference_handles]
        stop_quietly(collector, source)
    for s in rollout_stats + inference_stats + stats_at_stop:
        assert s.get("error_count", 0) == 0 and "error" not in s, s.get("errors") or s.get("error")

    served = [s["requests"] for s in inference_stats]
    assert all(n > 0 for n in served), f"both inference workers must serve requests: {served}"
    filled = {s["name"]: s["slots_filled"] for s in rollout_stats}
    # at rest no request is in flight: each served request was exactly one step of one split
    assert sum(served) * per_split == steps, f"served {served} requests for {steps} env steps"
    assert steps == sum(filled.values()) * rollout * per_split, "at rest every step lies in a filled slot"
    assert collector_stats["seen"] == filled, "every filled slot was signalled exactly once"
    assert collector_stats["held"] == {name: 4 for name in filled}, "each worker's 4 slots end with the consumer"
    assert min(filled.values()) >= 8, f"too little sampling to judge: {filled}"

    for name in filled:
        slots = [k["arrays"] | {"frames": k["frames"]} for k in kept if k["worker"] == name]
        assert len(slots) == filled[name]
        for j, s in enumerate(slots):
            check_complete(s, f"{name} slot #{j}")
        for i, chain in enumerate(split_chains(slots, num_splits=2)):
            check_counting_chain(chain, rollout, EPISODE)  # the env got the action inference wrote at that step
            versions = check_versions(chain, f"{name} split {i}")
            assert versions[-1] > versions[0], f"{name} split {i} never saw a new version: {np.unique(versions)}"
            check_log_probs(chain, spaces, config.model, f"{name} split {i}")
        assert max(s["policy_version"].max() for s in slots) == published[-1]


# ---- 4. a Box-action env and an image env ----


def run_at_version_one(cluster, hosts, env, actor_scale=1.0, **kwargs):
    """run_inline with a policy published once before sampling starts: every step is at version 1."""
    spaces = probe_env(env)
    source = spawn_one(cluster, PolicySource, hosts[2], PolicySourceSetup(spaces, actor_scale=actor_scale))
    try:
        assert source.call("publish") == 1
        slots, stats = run_inline(cluster, hosts, env, params_source=source, **kwargs)
    finally:
        stop_quietly(source)
    for k, s in enumerate(slots):
        check_complete(s, f"slot {k}")
        assert np.all(s["policy_version"] == 1), f"slot {k}: not sampled at version 1"
    # the slots hold the sampled actions themselves, with log-probs of the policy in the precision that acted
    check_log_probs(slots, spaces, ModelConfig(), env, precision=stats["inference_precision"], actor_scale=actor_scale,
                    on=(cluster.client, hosts[0]))
    return slots, stats


def test_box_actions_drive_pendulum_with_truncation_at_the_time_limit(cluster, hosts):
    rollout = 50
    slots, stats = run_at_version_one(cluster, hosts, "Pendulum-v1", slots=6, num_envs=2, num_splits=1,
                                      rollout=rollout)
    # a unit Gaussian's samples leave the Box [-2, 2] now and then: the env gets them clipped, and the slot stores
    # what the env got, with the probability of the whole tail beyond the bound (check_log_probs below)
    actions_all = np.concatenate([s["actions"] for s in slots])
    assert np.all(np.abs(actions_all) <= 2.0) and np.any(np.abs(actions_all) == 2.0), "no clipped action to check"
    for k, s in enumerate(slots):
        obs, actions, rewards = s["obs"].astype(np.float64), s["actions"], s["rewards"]
        assert actions.shape == (rollout, 2, 1) and actions.dtype == np.float32 and np.all(np.isfinite(actions))
        if k:
            np.testing.assert_array_equal(s["obs"][0], slots[k - 1]["obs"][rollout])
        g = k * rollout + np.arange(rollout)
        ends = ((g + 1) % PENDULUM_EPISODE == 0)[:, None].repeat(2, 1)
        np.testing.assert_array_equal(s["truncated"], ends.astype(np.uint8), err_msg=f"slot {k}: truncated")
        assert not s["terminated"].any()
        np.testing.assert_allclose(obs[..., 0] ** 2 + obs[..., 1] ** 2, 1.0, atol=1e-5)
        # Pendulum's own dynamics, with the stored action clipped to the Box: the env got exactly that action
        th, thdot = np.arctan2(obs[:-1, :, 1], obs[:-1, :, 0]), obs[:-1, :, 2]
        u = np.clip(actions[..., 0].astype(np.float64), -2.0, 2.0)
        np.testing.assert_allclose(rewards, -(th ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2), atol=2e-4,
                                   err_msg=f"slot {k}: rewards")
        new_thdot = np.clip(thdot + (15.0 * np.sin(th) + 3.0 * u) * 0.05, -8.0, 8.0)
        cont = ~ends
        np.testing.assert_allclose(obs[1:, :, 2][cont], new_thdot[cont], atol=2e-4, err_msg=f"slot {k}: dynamics")
        # where the time limit cut an episode, obs[t + 1] is the next episode's first: the real final observation,
        # which the learner bootstraps from, is in final_obs at t * B + b, and follows from obs[t] and the action
        used = s["final_at"][s["final_at"] >= 0]
        assert sorted(used.tolist()) == sorted((t * 2 + b) for t, b in zip(*np.nonzero(ends), strict=True))
        for kk, at in enumerate(s["final_at"][: len(used)]):
            t, b = divmod(int(at), 2)
            np.testing.assert_allclose(s["final_obs"][kk, 2], new_thdot[t, b], atol=2e-4, err_msg=f"slot {k}: final")
            assert not np.allclose(s["final_obs"][kk], s["obs"][t + 1, b]), "the final observation is the reset one"
    assert stats["episodes"] and all(e.length == PENDULUM_EPISODE for e in episodes_from_event(stats["episodes"]))


def check_image_slots(slots, rollout, *, num_envs, channels, num_actions):
    """84x84 uint8 frames with ``channels`` channels, discrete actions in range, and each slot starting with the
    observation that ended the one before it (slots arrive in order from one split)."""
    for k, s in enumerate(slots):
        obs, actions = s["obs"], s["actions"]
        assert obs.dtype == np.uint8 and obs.shape == (rollout + 1, num_envs, 84, 84, channels), f"slot {k}"
        assert actions.shape == (rollout, num_envs) and set(np.unique(actions).tolist()) <= set(range(num_actions))
        if k:
            np.testing.assert_array_equal(obs[0], slots[k - 1]["obs"][rollout], err_msg=f"slot {k}: chain")


def _paddle_x(frames):
    """Left column of the paddle (bottom rows) in a batch of Catch frames."""
    return np.argmax(frames[..., 80, :, 0] == 255, axis=-1)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_image_env_slots_hold_the_frames_the_actions_produced(cluster, hosts, precision):
    rollout = 10
    # a sharp action head: the log-prob check below tells a bfloat16 policy from a float32 one
    slots, stats = run_at_version_one(cluster, hosts, "daskrl/Catch-v0", slots=6, num_envs=2, num_splits=1,
                                      rollout=rollout, inference_precision=precision, actor_scale=100.0)
    assert stats["inference_precision"] == precision
    check_image_slots(slots, rollout, num_envs=2, channels=1, num_actions=3)
    for k, s in enumerate(slots):
        obs, actions = s["obs"], s["actions"]
        assert np.all(np.isin(obs, (0, 255))), "frames are black and white"
        lit = (obs == 255).reshape(rollout + 1, 2, -1).sum(-1)
        assert np.all(lit == 4 * 4 + 4 * 12), "every frame shows the ball and the paddle"
        g = k * rollout + np.arange(rollout)
        ends = ((g + 1) % CATCH_EPISODE == 0)[:, None].repeat(2, 1)
        np.testing.assert_array_equal(s["terminated"], ends.astype(np.uint8), err_msg=f"slot {k}: terminated")
        assert np.all(np.isin(s["rewards"][ends], (-1.0, 1.0))) and not s["rewards"][~ends].any()
        # the paddle moved as the recorded action says (4 px per step, within the frame)
        x = _paddle_x(obs).astype(int)
        expected = np.clip(x[:-1] + (actions.astype(int) - 1) * 4, 0, 84 - 12)
        np.testing.assert_array_equal(x[1:][~ends], expected[~ends], err_msg=f"slot {k}: paddle vs actions")
    assert stats["episodes"] and all(e.length == CATCH_EPISODE for e in episodes_from_event(stats["episodes"]))


def test_atari_slots_hold_stacked_frames_that_follow_each_other(cluster, hosts):
    """A real image env (ALE Breakout, 84x84x4 uint8): the CNN policy samples it and every slot holds each
    step's frame stack, shifted by one frame per step, chained across slots."""
    rollout = 8
    slots, stats = run_at_version_one(cluster, hosts, "atari/Breakout", slots=4, num_envs=2, num_splits=1,
                                      rollout=rollout)
    check_image_slots(slots, rollout, num_envs=2, channels=4, num_actions=4)
    for k, s in enumerate(slots):
        obs = s["obs"]
        within = ~(s["terminated"].astype(bool) | s["truncated"].astype(bool))  # [T, N]: step t did not end it
        # within an episode the newest frame moves one place down the stack
        np.testing.assert_array_equal(obs[1:, ..., :3][within], obs[:-1, ..., 1:][within], err_msg=f"slot {k}")
        assert obs.std() > 0
    assert stats["env_steps"] >= 4 * rollout * 2 and stats["error_count"] == 0


# ---- 4. sampling-only runs through train() ----


def test_sampling_only_run_on_an_embedded_cluster(tmp_path):
    budget = 600
    before = worker_processes()
    summary = train(Config.from_flat({
        "env": "daskrl/Catch-v0", "sampling_only": True, "train_for_env_steps": budget, "num_workers": 1,
        "num_envs_per_worker": 4, "worker_num_splits": 2, "rollout": 16, "train_dir": str(tmp_path),
        "experiment": "catch", "dashboard_address": "", "report_interval": 0.5,
    }))
    assert summary["env_steps"] >= budget and summary["episodes"] > 0, summary
    assert "--train-for-env-steps" in summary["stop_reason"]
    assert os.path.exists(tmp_path / "catch" / "metrics.csv") and os.path.exists(tmp_path / "catch" / "config.json")
    wait_for(lambda: worker_processes() <= before, timeout=15, what="the embedded cluster's processes exiting")


def test_sampling_only_run_on_an_existing_cluster_releases_its_memory(cluster, tmp_path):
    budget = 1200
    summary = train(Config.from_flat({
        "env": "Pendulum-v1", "sampling_only": True, "train_for_env_steps": budget, "num_workers": 2,
        "num_envs_per_worker": 2, "worker_num_splits": 1, "rollout": 32, "train_dir": str(tmp_path),
        "experiment": "pendulum", "report_interval": 0.5,
    }), client=cluster.client)
    assert summary["env_steps"] >= budget and summary["episodes"] > 0, summary
    assert summary["episode_return_mean"] < 0
    assert dask_internals.cluster_workers(cluster.client), "the user's cluster stays open"
    assert our_segments(cluster) == [], "the run's shared memory is released when train() returns"


def test_remote_inference_over_comms_when_buffers_are_on_another_host(tmp_path):
    """With DASKRL_FORCE_COMMS=1 every worker treats the others as another host: the inference worker reads
    observations and writes actions through RemoteArray RPCs instead of shared memory, and sampling still works."""
    with connect_cluster(n_workers=3, dashboard_address=None) as session:
        set_worker_env(session.client, "DASKRL_FORCE_COMMS", "1")
        config = Config.from_flat({
            "env": "CartPole-v1", "sampling_only": True, "inference": "remote", "num_workers": 2,
            "num_envs_per_worker": 8, "worker_num_splits": 2, "num_inference_workers": 1,
            "train_for_env_steps": 3_000, "train_for_seconds": 90.0, "train_dir": str(tmp_path),
            "experiment": "comms", "report_interval": 1.0, "dashboard_address": ""})
        summary = train(config, client=session.client)
        run_id = session.run_id
    assert summary["env_steps"] >= 3_000
    assert summary["episodes"] > 0
    assert list_segments(run_id) == []
