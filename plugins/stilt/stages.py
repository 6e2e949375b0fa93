"""STILT's stage configs. It has no plain config of its own: every stage runs the shared fine-tune (or evaluate)
body. The intermediate stages' config, ``IntermediateConfig`` (the shared ``FinetuneConfig`` whose ``save_model``
also writes the start model's pooler), overrides an extension point, so it lives beside the code it calls
(:mod:`.pooler`); the target's ``stilt-finetune`` and ``stilt-evaluate`` are the training library's configs."""
