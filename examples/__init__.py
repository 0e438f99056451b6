"""Runnable examples; `python -m examples.synthetic_trainer --help`."""
