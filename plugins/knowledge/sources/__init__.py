"""Built-in knowledge sources (registered through the ``kinject.plugins.knowledge.sources`` entry points)."""
