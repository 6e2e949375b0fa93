"""kinject.plugins.doktra (to be built)."""
