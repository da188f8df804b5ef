"""The core holding one decoder layer's weights at a time, for models larger than the memory budget.

    streaming_core.py  StreamingCore: the CoreEngine API with layers streamed from readers/
    sweep.py           one pass over the layers carrying several independent steps ("lanes")
    scripted.py        scripted steps: chunked prefills and teacher-forced decode steps run as lanes
    pipeline.py        a pipeline over torch.distributed ranks, each streaming a range of layers

Imports core/, readers/ and source.py; budget/ (the plan) builds on it."""
