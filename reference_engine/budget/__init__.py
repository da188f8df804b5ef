"""Running under a memory budget: decide before loading, then stream, batch and split the layers to stay within it.

    plan.py          make_plan: resident or streaming, predicted peak and passes for a Workload, before loading
    model_sizes.py   a model's sizes for the plan, from the tensor headers alone
    streaming.py     StreamingCore: the core holding one decoder layer's weights at a time
    layer_reader.py  ChunkedWeights: safetensors byte ranges read in chunks, page cache let go after
    gguf_reader.py   GGUFChunkedWeights: GGUF tensors read and dequantized a few rows at a time
    quant_reader.py  QuantChunkedWeights: quantized safetensors (files/quant/) read part by part and dequantized
    readers.py       chunked_reader: which of the readers a model's weights take
    sweep.py         one pass over the layers carrying several independent steps ("lanes")
    scripted.py      scripted steps: chunked prefills and teacher-forced decode steps run as lanes
    pipeline.py      a pipeline over torch.distributed ranks, each streaming a range of layers
"""
