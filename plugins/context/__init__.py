"""The `context` strategy: knowledge in context - the facts of the entities an input names, handed to the model as text
beside the input, then plain fine-tuning. The ceiling an injection method is read against."""
