"""Mean pooling over the tokens an attention mask keeps: how bi-encoder tasks score pairs, and what the libraries
pool with (a mean-pooled head, the knowledge probe, KIMERA's and MoP's entity states). A module of its own, so only
its users are keyed by it."""

from __future__ import annotations


def masked_mean(hidden, attention_mask):
    """(B, T, D) token states -> (B, D): the mean over the positions the attention mask keeps (a row with none
    gives zeros), in the states' dtype."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
