"""The VM pool and the providers behind it."""
