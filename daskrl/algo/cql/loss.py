"""CQL's conservative penalty (Kumar et al. 2020, CQL(H)), in the importance-sampled form of its official code.

Why: a critic fitted offline is only corrected where the data has actions; elsewhere its errors are free, and an
actor that climbs it goes where the critic overvalues. The penalty pushes Q down on actions away from the data
(a soft maximum, log-sum-exp, over actions) and up on the dataset's own, so Q off the data ends below Q on it. The
log-sum-exp over all actions is estimated from a few sampled ones, each divided by the density it was drawn from
(``logsumexp(Q(s, a_i) - log p(a_i))``): uniform actions in the box and the policy's actions at s and at s'. The
same log N, which that estimate omits, shifts every row alike and so changes no gradient.
"""

from __future__ import annotations

import torch


def conservative_penalty(sampled_q: torch.Tensor, log_density: torch.Tensor, data_q: torch.Tensor,
                         weights: torch.Tensor) -> torch.Tensor:
    """``sampled_q`` [B, M]: one critic's values of M sampled actions per state; ``log_density`` [B, M]: the log
    density each was drawn from; ``data_q`` [B]: its values of the dataset's actions; ``weights`` [B] importance
    weights -> ``mean(w * (logsumexp_i(Q(s, a_i) - log p(a_i)) - Q(s, a_data)))``."""
    return (weights * (torch.logsumexp(sampled_q - log_density, dim=1) - data_q)).mean()
