"""kinject's knowledge library: knowledge sources (triples, UMLS, HPO, corpora, teacher models), KG training data
and partitioning, and `kinject kg`. Methods build on it; it builds on the kernel and the tasks."""
