"""kinject.plugins.pretrain (to be built)."""
