"""Knowledge-graph machinery: KG training data (tokenized, Arrow-cached) and partitioning."""
