"""kinject-kgtext: verbalise a knowledge graph's triples ("head relation tail."), continue masked-LM training on
the sentences, then fine-tune on the task - written only against kinject.api and the knowledge library."""
