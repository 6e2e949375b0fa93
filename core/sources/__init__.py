"""Built-in knowledge sources (registered through the ``kinject.sources`` entry points)."""
