"""`python -m foxhunt_trainer`: the GPUs this container holds, as a training job would
report them (`gpus.discover`), printed as JSON; run it in a job's container to check attribution."""

from foxhunt_trainer.gpus import main

main()
