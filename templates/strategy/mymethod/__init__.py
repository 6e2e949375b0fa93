"""mymethod: the smallest kinject method (docs/method-skeleton.md). It fine-tunes the base model with its word
embeddings frozen, compares it with plain fine-tuning and writes a report. Copy it and grow it."""
