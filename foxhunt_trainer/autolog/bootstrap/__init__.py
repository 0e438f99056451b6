"""The directory `foxhunt-run` puts first on PYTHONPATH: its `sitecustomize` starts the
auto-instrumentation in every Python process of the program (`foxhunt_trainer.autolog`)."""
