"""From an error message to its likely root causes: an "error -> cause" table, made executable.

`match_signatures(text)` returns the known signatures found in a traceback, a log excerpt or a
symptom described in words ("GPU at 30% but slow"), most specific first. Each names the likely causes
in the order to rule them out and the llmdoctor checks/probes that confirm or clear each one.
The table puts specific signatures before generic ones; `checks` are `llmdoctor
check --select` terms, `probes` commands with MODEL_DIR as placeholder. Keep ids stable: users paste them into tickets.
"""
from __future__ import annotations

from llmdoctor.reporting.incidents import INCIDENTS
from llmdoctor.reporting.signature_types import Signature, SignatureMatch

SCAN_HEAD, SCAN_TAIL = 8_000, 32_000   # characters of a long text that are matched


# ---- the table -------------------------------------------------------------------------------------
_CUDA_SYNC = ("CUDA errors are reported asynchronously: rerun with CUDA_LAUNCH_BLOCKING=1 to get the real "
              "failing line, or on CPU (--device cpu) where the same bug is a readable IndexError.")

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "token-out-of-vocabulary", "Token id N is out of vocabulary",
        (r"token id (?P<token_id>-?\d+) is out of vocabulary", r"out of vocabulary"),
        ("the model sampled a padding row: embedding/lm_head have more rows than the tokenizer has tokens "
         "and those rows are not masked (vLLM #13175)",
         "a prompt was encoded with a different tokenizer (added tokens) than the one the model was trained with",
         "config.vocab_size disagrees with the tokenizer length"),
        checks=("VOC003", "VOC002", "VOC001"), references=("vllm#13175", "vllm PR#16529", "vllm PR#11980")),
    Signature(
        "index-out-of-range", "IndexError: index out of range in self",
        (r"index out of range in self",
         r"index (?P<index>-?\d+) is out of bounds for dimension \d+ with size (?P<size>\d+)",
         r"index out of bounds"),
        ("a token id >= the embedding rows: tokens were added to the tokenizer without resizing the embedding "
         "(len(tokenizer) 32004 vs vocab 32000, transformers #26714)",
         "a special token id (bos/eos/pad) in the configs points past the vocabulary",
         "positions beyond max_position_embeddings for a model with a position table"),
        checks=("VOC002", "VOC004", "CFG004"), probes=("llmdoctor fix MODEL_DIR -o FIXED_DIR --vocab",),
        references=("transformers#26714", "transformers#9247", "inseq PR#306")),
    Signature(
        "device-side-assert", "CUDA error: device-side assert triggered",
        (r"device-side assert triggered", r"srcIndex < srcSelectDimSize", r"indexSelect\w*Index",
         r"Assertion `t >= 0 && t < n_classes` failed", r"cudaErrorAssert"),
        ("an embedding lookup with a token id >= the embedding rows (the GPU form of 'index out of range in self')",
         "labels outside [0, vocab) in a loss, e.g. pad id -100 handled wrongly or a resized vocabulary",
         "torch.multinomial on probabilities with NaN/Inf (see 'probability tensor contains inf, nan')"),
        checks=("VOC002", "VOC004", "numerics"), immediate=_CUDA_SYNC,
        references=("inseq PR#306", "transformers#26714")),
    Signature(
        "illegal-memory-access", "CUDA error: an illegal memory access was encountered",
        (r"illegal memory access", r"cudaErrorIllegalAddress", r"misaligned address"),
        ("an out-of-range index inside a kernel: a KV-cache block table pointing past the pool, or a token id past "
         "the embedding", "a custom/fused kernel given a non-contiguous tensor or a wrong stride",
         "faulty GPU memory (check ECC/remapped rows)"),
        checks=("kv_cache", "VOC002", "GPU101"),
        probes=("llmdoctor probe bandwidth", "llmdoctor triage MODEL_DIR -o bundle/"),
        immediate=_CUDA_SYNC),
    Signature(
        "kv-cache-too-small", "KV cache cannot hold the max sequence length / no memory for cache blocks",
        (r"larger than the maximum number of tokens that can be stored in KV cache",
         r"no available memory for the cache blocks", r"not enough (free )?(kv[- ]cache|cache blocks)",
         r"preempted by PreemptionMode", r"is preempted", r"admission(s)? refused"),
        ("weights + KV reservation exceed the memory budget (gpu_memory_utilization / --memory-budget too low)",
         "max_model_len/max_position_embeddings far above what the workload needs (every sequence reserves it "
         "in a contiguous cache)",
         "KV fragmentation: free blocks exist but are stranded in partly used pages"),
        checks=("kv_cache",), probes=("llmdoctor probe kv --with-model MODEL_DIR",),
        references=("vllm check_enough_kv_cache_memory",)),
    Signature(
        "cuda-out-of-memory", "CUDA out of memory",
        (r"CUDA out of memory", r"OutOfMemoryError", r"CUBLAS_STATUS_ALLOC_FAILED", r"out of memory",
         r"latency (slowly |gradually )?(creeps|increases|grows|goes up).{0,80}(OOM|out of memory)"),
        ("KV cache growth: long sequences or many concurrent ones with a contiguous max-length reservation",
         "KV page fragmentation or leaked sequences after a long run: latency creeps up, then OOM "
         "(used blocks never return to baseline)",
         "weights loaded in float32 instead of bf16/fp16 (2x the memory)",
         "allocator fragmentation: reserved >> allocated (try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
         "another process holds the GPU memory (see memory used in the triage bundle)"),
        checks=("kv_cache", "WGT004", "GPU101"), probes=("llmdoctor probe kv --with-model MODEL_DIR",
                                              "llmdoctor triage MODEL_DIR -o bundle/")),
    Signature(
        "probability-nan", "probability tensor contains either inf, nan or element < 0",
        (r"probability tensor contains either .?inf.?, .?nan.? or element < 0", r"invalid multinomial distribution",
         r"logits? (are|contain|contains) (all )?(nan|inf)"),
        ("logits are NaN/Inf: fp16 activations overflow past 65504 in a late layer (run in bf16 or fp32)",
         "untrained (zero or random) rows for special tokens used in the prompt (Llama-3 reserved tokens)",
         "temperature 0 or a penalty dividing by zero in a custom sampler",
         "NaN already in a weight tensor (corrupted conversion)"),
        checks=("numerics", "golden", "activations", "EMB001", "EMB002", "WGT005", "WGT008"),
        references=("unsloth#658", "unsloth#1056", "meta-llama/llama3#77", "vllm#14126")),
    Signature(
        "exclamation-marks", 'generation is only "!!!!"',
        (r"!{4,}", r"only (outputs?|generates?|produces?|returns?) (exclamation|!)"),
        ("every logit is NaN, argmax returns id 0, and id 0 decodes to '!' in GPT-2/Llama-3 style vocabularies",
         "fp16 overflow in the residual stream (activations past 65504 around the last layers)",
         "NaN in the weights or untrained special-token embeddings"),
        checks=("golden", "numerics", "activations", "WGT008", "WGT005", "EMB001"),
        references=("vllm#14126", "onnxruntime-genai PR#2444", "olmo-cookbook#60", "Qwen3#868")),
    Signature(
        "attention-mask-pad-token", "The attention mask and the pad token id were not set",
        (r"attention mask and the pad token id were not set", r"Setting `?pad_token_id`? to `?eos_token_id`?",
         r"pad_token_id.{0,40}(is )?None", r"right-padding was detected"),
        ("no pad token: pad == eos or unset, so batched generation cannot tell padding from the end of text",
         "right padding on a decoder-only model: generation continues from pad tokens",
         "attention_mask not passed: padded positions are attended to and position ids shift"),
        checks=("VOC007", "TOK010", "kv_cache"), references=("transformers#25790", "unsloth#3699")),
    Signature(
        "never-stops", "generation never stops / always hits max_new_tokens",
        (r"(never|doesn'?t|does not|won'?t) stop", r"(always|keeps?) (hit(s|ting)?|reach(es|ing)?) max_new_tokens",
         r"infinite generation", r"no eos"),
        ("eos_token_id in generation_config does not include the chat template's end-of-turn token (<|eot_id|>)",
         "the EOS row is untrained, so its probability never wins",
         "stop strings not configured for a base model used as chat"),
        checks=("VOC006", "VOC005", "EMB001", "TOK009", "generation")),
    Signature(
        "repeated-text", "the output repeats the same text",
        (r"\b(?P<repeat>\w.{6,80}?)(?:\s*\1){3,}", r"repeat(s|ing|ed)? (itself|the same|text|output)",
         r"repetition|repetitive|degenerat\w+"),
        ("greedy decoding without repetition penalty on a small model (expected behaviour, not a bug)",
         "a context longer than the trained window with rope_scaling dropped from the config "
         "(degenerates past the original context)",
         "wrong chat template or missing BOS: the model sees text unlike its training format",
         "a KV-cache/position bug: incremental decode diverges from a full recompute"),
        checks=("generation", "kv_cache", "CFG003", "TOK007", "TOK008"),
        references=("unsloth PR#6197", "mlx-vlm PR#1710", "transformers#46190")),
    Signature(
        "low-utilisation-slow", "GPU utilisation is low but inference is slow",
        (r"(only|just|shows?|at)?\s*(?P<util_pct>\d{1,2}) ?% (gpu )?utili[sz]ation.{0,60}slow",
         r"slow.{0,60}(low|only \d{1,2} ?%) (gpu )?utili[sz]ation", r"memory[- ]bandwidth (bound|saturat\w*)"),
        ("batch-1 decode is memory-bandwidth bound: each token reads every weight once; nvidia-smi 'utilization' "
         "is the fraction of time a kernel ran, not how busy the SMs or DRAM are",
         "Python/kernel-launch overhead between small kernels (overhead bound)",
         "clocks throttled (power cap, thermal, hw slowdown) or a PCIe link trained below its generation/width"),
        checks=("GPU101", "GPU102", "GPU103"), probes=("llmdoctor probe bandwidth --model MODEL_DIR",)),
    Signature(
        "dtype-mismatch", "expected scalar type / mat1 and mat2 must have the same dtype",
        (r"expected (scalar type|m1 and m2 to have the same dtype)", r"must have the same dtype",
         r"\"\w+\" not implemented for '(Half|BFloat16)'"),
        ("weights in mixed dtypes (some tensors float32 in a bf16 checkpoint)",
         "bf16/fp16 kernels missing on this device (CPU half ops, pre-Ampere bf16)"),
        checks=("WGT004", "numerics")),
    Signature(
        "safetensors-corrupt", "safetensors header error / file not fully covered",
        (r"HeaderTooLarge|HeaderTooSmall|InvalidHeader\w*|MetadataIncompleteBuffer|incomplete metadata",
         r"Error while deserializing header", r"version https://git-lfs"),
        ("a truncated or interrupted download", "a git-lfs pointer file checked out instead of the weights",
         "a conversion script that wrote overlapping or gapped tensor spans"),
        checks=("FIL002", "FIL003")),
    Signature(
        "pickle-weights", "Weights only load failed / UnpicklingError",
        (r"Weights only load failed", r"UnpicklingError", r"pytorch_model\.bin"),
        ("the checkpoint is a pickle (.bin/.pt): it can execute code when loaded; llmdoctor never unpickles",),
        checks=("FIL004",), immediate="convert the checkpoint to safetensors in an isolated environment"),
    Signature(
        "size-mismatch", "size mismatch when loading weights",
        (r"size mismatch for", r"Error\(s\) in loading state_dict", r"shape mismatch", r"Missing key\(s\)",
         r"Unexpected key\(s\)"),
        ("config.json does not describe these weights (vocab_size, num_key_value_heads, head_dim changed)",
         "embeddings resized in the tokenizer but not in the checkpoint, or the reverse"),
        checks=("WGT001", "WGT002", "WGT003", "VOC002")),
    Signature(
        "unknown-architecture", "unrecognized model type / architecture",
        (r"does not recognize this architecture", r"Unrecognized (configuration class|model)",
         r"model type `?\w+`? but Transformers does not recognize", r"unsupported architecture"),
        ("config.json names an architecture newer than the installed library (upgrade it)",
         "model_type/architectures edited by a conversion script"),
        checks=("CFG001",), probes=("llmdoctor triage MODEL_DIR -o bundle/",)),
    Signature(
        "sequence-too-long", "sequence length longer than the maximum",
        (r"Token indices sequence length is longer than the specified maximum",
         r"Input length of input_ids is \d+, but `?max_length`? is set to \d+", r"exceeds (the )?max(imum)? context"),
        ("the prompt exceeds the model's context (max_position_embeddings / model_max_length)",
         "tokenizer model_max_length disagrees with the model config"),
        checks=("CFG004",)),
    Signature(
        "chat-template-error", "chat template failed to render",
        (r"TemplateError", r"jinja2\.exceptions", r"Conversation roles must alternate",
         r"Cannot use chat template functions because"),
        ("the template expects a role order (system/user/assistant) the caller does not follow",
         "the tokenizer has no chat_template (a base model)"),
        checks=("TOK008", "TOK009")),
    Signature(
        "mojibake-output", "garbled characters (\ufffd) in streamed output",
        (r"\ufffd", r"UnicodeDecodeError", r"invalid (continuation|start) byte"),
        ("a multi-byte UTF-8 character split across tokens was decoded token by token",
         "the tokenizer decoder (byte-level vs SentencePiece) does not match the vocabulary"),
        checks=("TOK004", "TOK005")),
    Signature(
        "no-kernel-image", "no kernel image is available for execution on the device",
        (r"no kernel image is available", r"not compatible with the current PyTorch installation",
         r"CUDA capability sm_\d+ is not compatible"),
        ("the installed torch build does not include this GPU's compute capability",),
        checks=("ENV001",), probes=("llmdoctor triage MODEL_DIR -o bundle/",)),
    Signature(
        "driver-too-old", "NVIDIA driver / CUDA runtime mismatch",
        (r"driver version is insufficient", r"NVIDIA driver on your system is too old", r"Found no NVIDIA driver",
         r"Torch not compiled with CUDA enabled", r"NVML Shared Library Not Found", r"Driver/library version mismatch"),
        ("the CUDA runtime torch was built with needs a newer driver", "a CPU-only torch build",
         "the driver was upgraded without a reboot (NVML/RM version mismatch)", "no NVIDIA driver in this container"),
        checks=("ENV001", "GPU101"), probes=("llmdoctor probe bandwidth", "llmdoctor triage MODEL_DIR -o bundle/")),
    Signature(
        "gpu-hardware-fault", "GPU hardware fault (Xid, ECC, fallen off the bus)",
        (r"\bXid\b", r"fallen off the bus", r"uncorrectable ECC", r"ECC error", r"GPU is lost",
         r"row remapping (failure|pending)"),
        ("uncorrectable memory errors or a pending row remap (needs a GPU reset)",
         "power or thermal events, a failing PCIe link"),
        checks=("GPU101",), probes=("llmdoctor probe bandwidth", "llmdoctor triage MODEL_DIR -o bundle/"),
        immediate="drain the node; the ECC and remapped-row counters are in the triage bundle"),
)


def match_details(text: str) -> list[SignatureMatch]:
    """Every signature found in `text`, in table order (the table lists specific before generic)."""

    flat = " ".join(str(text).split())
    if len(flat) > SCAN_HEAD + SCAN_TAIL:  # a whole log: the error is at its end, the command at its start
        flat = flat[:SCAN_HEAD] + " ... " + flat[-SCAN_TAIL:]
    out = []
    for sig in every_signature():
        m = sig.search(flat)
        if m:
            values = {k: v for k, v in m.groupdict().items() if v is not None}
            out.append(SignatureMatch(sig, m.group(0)[:200], values))
    return out


def every_signature() -> tuple[Signature, ...]:
    """The error table, then the published incidents (llmdoctor.reporting.incidents)."""
    return SIGNATURES + INCIDENTS


def match_signatures(text: str) -> list[Signature]:
    """The known error signatures in `text` (empty when none is known); never raises on any string."""
    return [m.signature for m in match_details(text)]


def render_explanation(text: str, model_dir: str = "MODEL_DIR") -> str:
    """Plain-text answer for `llmdoctor explain "<error text>"`, graceful on unknown text."""
    matches = match_details(text)
    if not matches:
        return ("No known error signature matched this text.\n"
                f"Collect an incident bundle with `llmdoctor triage {model_dir} -o bundle/` and run "
                f"`llmdoctor check {model_dir}`; `llmdoctor explain CHECK_ID` documents any finding.")
    return "\n\n".join(_render_one(m, model_dir) for m in matches)


def _render_one(match: SignatureMatch, model_dir: str) -> str:
    sig = match.signature
    lines = [f"[{sig.id}] {sig.title}", f"  matched: {match.excerpt!r}"]
    if match.values:
        lines.append("  values: " + ", ".join(f"{k}={v}" for k, v in match.values.items()))
    lines.append("  likely causes:")
    lines += [f"    {i}. {cause}" for i, cause in enumerate(sig.causes, 1)]
    if sig.immediate:
        lines.append(f"  right now: {sig.immediate}")
    commands = sig.confirm_commands(model_dir)
    if commands:
        lines.append("  confirm with:")
        lines += [f"    $ {c}" for c in commands]
    if sig.references:
        lines.append("  seen in: " + ", ".join(sig.references))
    return "\n".join(lines)
