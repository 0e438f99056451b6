"""`python -m observability.instrument`: the GPUs this container holds, as a training job would
report them (`gpus.discover`), printed as JSON; run it in a job's container to check attribution."""

from observability.instrument.gpus import main

main()
