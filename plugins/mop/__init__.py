"""kinject.plugins.mop: Mixture-of-Partitions (Meng et al., EMNLP 2021) - a METIS-partitioned knowledge graph,
one bottleneck adapter per partition trained with the base model frozen, and the adapters mixed (softmax,
Gumbel or MoE fusion) while fine-tuning on the task. See docs/mop.md."""
