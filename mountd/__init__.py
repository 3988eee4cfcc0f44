"""The FUSE daemon: a thin protocol adapter over the swfs engine."""
