"""The swfs benchmark suite: ``python -m bench [--quick]``; see bench/README.md."""
