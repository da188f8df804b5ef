"""Running under a memory budget: decide before loading what a workload will need and how to run it.

    plan.py          make_plan: resident or streaming, predicted peak and passes for a Workload, before loading
    model_sizes.py   a model's sizes for the plan, from the tensor headers alone

The streaming core the plan chooses lives in streaming/, the chunked readers in readers/."""
