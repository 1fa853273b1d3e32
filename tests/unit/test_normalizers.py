import json

import numpy as np
import pytest
import torch

from daskrl.algo.common.normalizers import ReturnNormalizer, RunningMeanStd


def _batches(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = [1, 7, 64, 3, 200]
    return [rng.normal(loc=[1.0, -3.0, 10.0], scale=[0.5, 2.0, 30.0], size=(n, 3)) for n in sizes]


def test_running_stats_equal_concatenated_numpy_stats():
    rms = RunningMeanStd(shape=(3,))
    batches = _batches()
    for i, batch in enumerate(batches):
        # Mix numpy and (float64) torch input.
        rms.update(torch.from_numpy(batch) if i % 2 else batch)
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-10)
    assert rms.count == len(data)


def test_update_ignores_empty_batch_and_rejects_wrong_shape():
    rms = RunningMeanStd(shape=(3,))
    rms.update(np.zeros((0, 3)))
    assert rms.count == 0
    with pytest.raises(ValueError):
        rms.update(np.zeros((4, 2)))


def test_normalize_numpy_and_torch():
    rms = RunningMeanStd(shape=(3,))
    for batch in _batches():
        rms.update(batch)
    x = np.array([[1.0, -3.0, 10.0], [100.0, 0.0, -500.0]])
    expected = np.clip((x - rms.mean) / np.sqrt(rms.var + 1e-8), -5.0, 5.0)
    np.testing.assert_allclose(rms.normalize(x), expected, rtol=1e-6)
    out_t = rms.normalize(torch.tensor(x, dtype=torch.float32))
    assert out_t.dtype == torch.float32
    np.testing.assert_allclose(out_t.numpy(), expected, rtol=1e-5)
    assert np.abs(rms.normalize(x, clip=None)).max() > 5.0


def test_state_dict_round_trip():
    rms = RunningMeanStd(shape=(3,))
    batches = _batches(1)
    for batch in batches[:3]:
        rms.update(batch)
    state = json.loads(json.dumps(rms.state_dict()))  # plain floats/lists only
    restored = RunningMeanStd(shape=(3,))
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.mean, rms.mean)
    np.testing.assert_array_equal(restored.var, rms.var)
    assert restored.count == rms.count
    for batch in batches[3:]:
        rms.update(batch)
        restored.update(batch)
    np.testing.assert_array_equal(restored.mean, rms.mean)
    np.testing.assert_array_equal(restored.var, rms.var)
    with pytest.raises(ValueError):
        RunningMeanStd(shape=(2,)).load_state_dict(state)


def test_scalar_state_dict_round_trip():
    rms = RunningMeanStd()
    rms.update(np.array([1.0, 2.0, 4.0]))
    restored = RunningMeanStd()
    restored.load_state_dict(json.loads(json.dumps(rms.state_dict())))
    assert float(restored.mean) == pytest.approx(7.0 / 3.0)
    assert float(restored.var) == pytest.approx(np.var([1.0, 2.0, 4.0]))


def test_return_normalizer():
    rn = ReturnNormalizer()
    returns = torch.randn(16, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 40.0 + 7.0
    rn.update(returns)
    normalized = rn.normalize(returns)
    assert normalized.mean().item() == pytest.approx(0.0, abs=1e-9)
    assert normalized.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(rn.denormalize(normalized), returns)
    restored = ReturnNormalizer()
    restored.load_state_dict(rn.state_dict())
    torch.testing.assert_close(restored.normalize(returns), normalized)
