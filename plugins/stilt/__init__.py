"""kinject.plugins.stilt (to be built)."""
