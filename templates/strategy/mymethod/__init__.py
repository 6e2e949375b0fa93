"""mymethod: the smallest method of the kinject skeleton (docs/method-skeleton.md) - the shared baseline, one
fine-tune of the base model with its word embeddings frozen, a paired comparison and a report. Copy it and grow it."""
