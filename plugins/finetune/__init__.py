"""The `finetune` strategy: the baseline every method is compared with."""
