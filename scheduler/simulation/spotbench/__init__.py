"""The offline benchmark of the spot rule on published AWS spot availability traces."""
