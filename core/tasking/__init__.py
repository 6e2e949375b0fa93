"""Reusable task shapes: concrete tasks supply data readers; these supply features, heads and scoring."""

from kinject.tasking.sequence import SequenceClassificationTask, SequenceTaskConfig, evaluate_all

__all__ = ["SequenceClassificationTask", "SequenceTaskConfig", "evaluate_all"]
