"""kinject's knowledge library: knowledge sources (triples, UMLS, HPO, corpora, teacher models), KG training data
and partitioning, continued masked-LM training as public stage builders (:mod:`.mlm`), and `kinject kg`. Methods
build on it; it builds on the kernel and the tasks."""
