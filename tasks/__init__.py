"""kinject's built-in tasks (registered through the ``kinject.tasks`` entry points)."""
