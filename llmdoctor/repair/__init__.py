"""`llmdoctor fix`: a repaired copy of a model directory (fix.py), written tensor by tensor
(safetensors_writer.py); the source is only read."""
