"""kinject.plugins.kimera (to be built)."""
