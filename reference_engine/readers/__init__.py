"""Tensors read in row blocks from any weight table, the page cache let go after: the layer a streaming pass
holds, the scan of every weight, the head read in blocks.

    layer_reader.py  ChunkedWeights: safetensors byte ranges read in chunks
    gguf_reader.py   GGUFChunkedWeights: GGUF tensors read and dequantized a few rows at a time
    quant_reader.py  QuantChunkedWeights: quantized safetensors (files/quant/) read part by part and dequantized
    chunked.py       chunked_reader: which of the readers a weight table takes
    read_ahead.py    ReadAhead: the one read-ahead thread (the streaming core's next layer, the checks'
                     weight scan's next row block), reading into reused buffers

Imports files/ only; adapter/, source.py, core/ and streaming/ build on it."""
