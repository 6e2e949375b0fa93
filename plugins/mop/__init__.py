"""kinject.plugins.mop (to be built)."""
