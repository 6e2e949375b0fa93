"""Built-in knowledge sources (registered through the ``kinject.knowledge.sources`` entry points)."""
