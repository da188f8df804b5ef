"""The published 2025-2026 incidents where a model loaded and a server answered 200 while the answers were wrong,
findable by the symptom users wrote ("repeats the question", "tool call missing in stream").

Each entry is a `Signature` whose patterns are the symptom in users' words, whose checks are the ids that catch it
and whose references are the public reports (tracker#number). docs/incidents.md lists the same incidents with the
command that shows each; `tests/llmdoctor/reporting/test_incidents.py` keeps the two in step.
"""
from __future__ import annotations

from llmdoctor.reporting.signature_types import Signature

# ---- files and conversion --------------------------------------------------------------------------
FILES: tuple[Signature, ...] = (
    Signature(
        "rope-scaling-lost-in-conversion", "the GGUF loses long prompts that the original model reads",
        (r"yarn (scaling )?(is )?(not|never) (written|converted|applied)", r"rope[ _]scaling (is )?(missing|lost|"
         r"dropped|not (written|converted|applied))", r"(gibberish|garbage|nonsense) (after|past|beyond|on) "
         r"(\d+k? tokens|long (prompts|context|inputs))", r"long (prompts|context) (broken|gibberish|garbage) "
         r"(in|with|after) (the )?(gguf|conversion|llama\.cpp)"),
        ("the converter did not write the config's rope scaling (llama.cpp#13322: Qwen3-MoE's YaRN): llama.cpp "
         "reads the model unscaled", "the GGUF carries another factor or original context length than config.json",
         "a llama3 / longrope block whose rope_freqs / rope_factors tensors were not written"),
        checks=("GGF020",), references=("ggml-org/llama.cpp#13322",)),
    Signature(
        "yarn-attention-factor-ignored", "logits off by a constant factor on a YaRN model",
        (r"attention[_ ]factor (is )?(ignored|not (applied|read|used)|missing|dropped)",
         r"mscale(_all_dim)? (is )?(ignored|wrong|not (applied|read|used))",
         r"logits? (are )?(off|differ|wrong) by (about )?\d+ ?%"),
        ("yarn's attention_factor (or mscale / mscale_all_dim) read differently from transformers, or not carried "
         "into the GGUF (rope.scaling.yarn_attn_factor): every attention logit scaled wrong (vllm#48621)",),
        checks=("GGF020",), references=("vllm-project/vllm#48621",)),
    Signature(
        "static-yarn-on-short-prompts", "worse answers on short prompts after enabling YaRN",
        (r"(worse|degraded|lower quality|dumber) (answers )?(on|for|with) short (prompts|texts|inputs|context)",
         r"static yarn", r"after (enabling|adding) (yarn|rope[ _]scaling)"),
        ("a static yarn factor applies to every prompt, short ones too (Qwen3's model cards: add it only when "
         "prompts pass the original length)",),
        checks=("CFG064",), references=("Qwen3 model cards: static YaRN note",)),
    Signature(
        "bos-missing", "the model repeats itself: prompts reach it without BOS",
        (r"(missing|no|without( the)?) (<bos>|bos( token)?)", r"add_bos(_token)? (is |set to )?false",
         r"repeats (itself|the (question|prompt))"),
        ("tokenizer.ggml.add_bos_token false (or tokenizer_config add_bos_token false) on a model trained with "
         "BOS: llama.cpp sends raw prompts, and chat prompts whose template does not write it, without BOS",
         "tokenizer_config.json's add_bos_token and tokenizer.json's post-processor disagree (TOK024)"),
        checks=("GGF038", "TOK024", "EPT011")),
    Signature(
        "bos-doubled", "two BOS tokens at the start of every prompt",
        (r"(double|two|duplicated?|2) (<bos>|bos)( tokens?)?", r"<bos>\s*<bos>", r"bos (token )?twice",
         r"<\|begin_of_text\|>\s*<\|begin_of_text\|>"),
        ("a template that writes {{ bos_token }} meets a tokenizer that adds BOS, in code that renders the "
         "template and then encodes with add_special_tokens", "a template that writes BOS twice itself"),
        checks=("TOK007", "GGF005", "EPT011")),
    Signature(
        "bos-stripped-as-duplicate", "the template's first token ([gMASK]) never reaches the model",
        (r"\[?gmask\]?(<sop>)?( preamble)? (is )?(missing|lost|stripped|dropped|removed|gone)",
         r"(missing|lost|stripped|dropped|removed|no|strips|removes|drops|cuts) (the )?\[?gmask",
         r"(bos|first token) (is )?(stripped|removed|cut|deduplicated)( as a duplicate)?"),
        ("a server that removes the template's leading bos_token text as a duplicate BOS and adds none back: "
         "llama-server --jinja cut GLM-4.5's [gMASK] (its GGUF BOS, add_bos_token false) until "
         "ggml-org/llama.cpp#15086", "a GGUF whose BOS is a token the template writes while add_bos_token is "
         "false, on a server that de-duplicates BOS without looking at add_bos_token"),
        checks=("EPT011",), references=("ggml-org/llama.cpp#15086", "ggml-org/llama.cpp#13140")),
    Signature(
        "turn-token-typed-as-text", "the model never stops: its turn end is an ordinary token",
        (r"(<\|im_end\|>|<end_of_turn>|<\|eot_id\|>|turn[- ]end|eos) (token )?(is )?(printed|shown|appears|"
         r"shows up) in (the )?(output|answer|response)", r"(model|it) (loops|never stops|keeps generating)",
         r"token_type (is )?(normal|wrong)", r"(eos|eot|end[- ]of[- ]turn) (token )?(is )?not (marked )?special"),
        ("a turn end or turn marker typed NORMAL in tokenizer.ggml.token_type: llama.cpp splits it into text "
         "pieces in the prompt and prints it when generated (llama.cpp#27683)",
         "the EOS / turn end listed with \"special\": false in tokenizer.json, so converters type it as text"),
        checks=("GGF036", "TOK034"), references=("ggml-org/llama.cpp#27683",)),
    Signature(
        "tied-head-mismatch", "fluent nonsense from the first token: the output head is not the trained one",
        (r"tie_word_embeddings", r"lm_head(\.weight)? (is )?(ignored|missing|not (loaded|used)|randomly "
         r"initiali[sz]ed)", r"random (lm_head|output head|head)"),
        ("tie_word_embeddings false with no lm_head stored: a random head (vllm#53019)",
         "tie_word_embeddings true over a stored lm_head that differs from the embedding: loaders ignore the "
         "trained head"),
        checks=("WGT001", "WGT009"), references=("vllm-project/vllm#53019",)),
    Signature(
        "pre-tokenizer-regex-mismatch", "llama.cpp tokenizes the same text differently than transformers",
        (r"(different|wrong|other) tokens? (in|with|from|than) (llama\.cpp|the gguf)",
         r"tokeni[sz](ation|er|es) (is )?differ(s|ent|ently)", r"pre[- ]?tokeni[sz]er (regex )?(mismatch|differs|"
         r"is wrong)"),
        ("the GGUF's tokenizer.ggml.pre selects llama.cpp regexes other than tokenizer.json's (llama.cpp#23252)",
         "tokenizer.ggml.pre missing or 'default' (GGF003)"),
        checks=("GGF037", "GGF003"), references=("ggml-org/llama.cpp#23252",)),
)


# ---- chat templates and the serving chain ----------------------------------------------------------
_PROBE = "llmdoctor probe endpoint URL --model MODEL_DIR --select {}"
CHAT: tuple[Signature, ...] = (
    Signature(
        "system-message-dropped", "A second or mid-conversation system message never reaches the prompt",
        (r"system (prompt|message|instruction)s? (is |are |gets? |being )?(ignored|dropped|lost|missing|skipped)",
         r"(second|later|mid[- ]conversation|multiple) system (prompt|message)",
         r"(ignores?|drops?|loses?) (the |my )?system (prompt|message)"),
        ("the chat template keeps only the first system message (gpt-oss's released template)",
         "the server renders another template than the model's own (--chat-template-file, a built-in)"),
        checks=("TOK035",), probes=(_PROBE.format("EPT085"),), references=("vllm#44330",)),
    Signature(
        "tool-call-history-id", "The next turn ends \"stop\" with no tool call once the history holds earlier calls",
        (r"(tool[- ]?call )?ids? (format|like|such as)? ?(functions\.\w+:\d+|call\d{3,})",
         r"(next|second|third|later) (turn|call)s? (ends?|finish(es)?) (with )?.?stop.? (with )?no (tool )?call",
         r"tool calls? (silently )?dropped in multi[- ]turn"),
        ("the template or the tool parser expects its own id form (Kimi K2: functions.NAME:INDEX) and gets another",
         "a gateway rewrote the ids the server gave"),
        checks=(), probes=(_PROBE.format("EPT075"),), references=("sglang#25362", "vllm#21259", "sglang#9606")),
    Signature(
        "tool-calls-finish-empty", "finish_reason \"tool_calls\" with an empty tool_calls list",
        (r"finish_reason.{0,12}tool_calls.{0,40}(empty|no|\[\]) ?(tool_calls|tool calls)",
         r"empty tool_calls", r"tool_calls (list )?(is |are )?(an )?empty", r"tool calls? (are )?never executed"),
        ("the server's parser found no call but the finish reason was set from the request's tool_choice",
         "the parser lost the call the model wrote"),
        checks=(), probes=(_PROBE.format("EPT071"),), references=("vllm#53255",)),
    Signature(
        "tool-call-missing-in-stream", "A tool call missing in the stream while the non-streamed answer has it",
        (r"tool[- ]?calls? (is |are )?(missing|lost|dropped|absent) (in|from|when) (the )?stream",
         r"stream(ing|ed)? .{0,40}(no|missing|lost) tool[- ]?calls?",
         r"(begin|start) and end .{0,30}(one|same|single) (delta|chunk)"),
        ("the streaming tool parser misses a call whose begin and end markers arrive in one delta",),
        checks=(), probes=(_PROBE.format("EPT072"),), references=("vllm#48020",)),
    Signature(
        "zero-argument-call-lost", "A call to a tool without arguments is lost",
        (r"(zero|no)[- ]arg(ument)?s? (tool )?(call )?(is |are |gets? )?(lost|dropped|discarded|missing|ignored)",
         r"tool (call )?(with|without) (no |omitted |empty )?arguments? .{0,30}(lost|dropped|discarded|ignored)"),
        ("the tool parser treats a call without arguments as no call",),
        checks=(), probes=(_PROBE.format("EPT076"),), references=("ollama#17328",)),
    Signature(
        "tool-call-arguments-empty", "Tool call arguments \"{}\" where the model wrote some",
        (r"arguments? (is |are |come back |returned )?(as )?.?\{\}.? ?(empty|although|but|instead|where)",
         r"empty (tool[- ]call )?arguments", r"arguments (are |is )?(lost|dropped|empty)"),
        ("the tool parser lost the arguments (a format it half reads)",),
        checks=(), probes=(_PROBE.format("EPT071"),), references=()),
    Signature(
        "thinking-off-answer-in-reasoning", "With thinking off the answer is in reasoning_content and content is null",
        (r"enable_thinking.{0,20}(false|off).{0,80}(content|reasoning)",
         r"content (is )?(null|empty|none).{0,60}reasoning_content",
         r"answer (is |goes |lands |ends up )?in(to)? (the )?reasoning(_content)?"),
        ("the reasoning parser treats the start of every answer as thinking, ignoring the template's closed block",),
        checks=(), probes=(_PROBE.format("EPT086"),), references=("QwenLM/Qwen3#1297", "sglang#20586")),
    Signature(
        "generation-config-overrides-request-defaults",
        "vLLM ignores my sampling parameters: temperature / top_k from generation_config.json",
        (r"(temperature|top[_ ]?[kp]|sampling param\w*|repetition[_ ]penalty)\W+(\w+\W+){0,4}(is |are |seems? "
         r"(to be )?)?(ignored|not (honou?red|respected|applied))",
         r"generation[_ ]config\W+(\w+\W+){0,6}(overrid\w+|overwrit\w+|override)",
         r"default sampling param\w* (have been |were )?overridden"),
        ("vLLM's --generation-config auto (its default since 0.8) makes generation_config.json's temperature, "
         "top_k, top_p, min_p and repetition_penalty the defaults of every request that leaves them out",
         "a client that sends only temperature (the OpenAI fields) gets the model card's top_k / "
         "repetition_penalty, which change even greedy answers"),
        checks=("EPT032",),
        probes=("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT032",),
        immediate="send every sampling field in each request, or start vLLM with --generation-config vllm",
        references=("vllm#15241", "vllm#15281", "vllm#17075"),
    ),
)


# ---- serving configurations that change answers ----------------------------------------------------
SERVING: tuple[Signature, ...] = (
    Signature(
        "kv-cache-quantized", "Answers degrade or turn to gibberish with a quantized KV cache",
        (r"(kv|k/v)[ -]?cache[^.\n]{0,60}(q4_0|q8_0|q4|q8|fp8|quantiz)", r"(q4_0|q8_0|fp8|quantized)[^.\n]{0,40}"
         r"(kv|k/v)[ -]?cache", r"cache[-_]type[-_][kv]", r"kv[-_]cache[-_]dtype"),
        ("a KV cache quantized to 4 bits (llama-server -ctk/-ctv q4_0, OLLAMA_KV_CACHE_TYPE=q4_0) moves the "
         "logprobs measurably and changes greedy answers; q8_0 stays near f16 on a healthy build",
         "a backend's quantized-cache kernel broken for this model or device (gibberish past some length)"),
        ("EPT043",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT043",),
        "serve the same model with an f16 cache and compare the EPT043 windows",
        ("ollama/ollama#17614", "ggml-org/llama.cpp#23044", "ggml-org/llama.cpp#23717")),
    Signature(
        "batch-variant-greedy", "The same temperature-0 request answers differently when others run at once",
        (r"(different|changes?|diverg)[^.\n]{0,60}(concurrent|batch(ed)? (size|composition)|in parallel|batched)",
         r"(concurrent|batched|batch size)[^.\n]{0,60}(different|changes?|diverg|not deterministic)",
         r"batch invarian"),
        ("batch-shape arithmetic: another batch size sums in another order and flips a near tie",
         "state leaking between requests batched together (a real difference, not a near tie)"),
        ("EPT044",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT044",),
        "send the request alone and among others; serve with one slot (-np 1) to confirm",
        ("jundot/omlx#3476", "Blaizzy/mlx-vlm#2242")),
    Signature(
        "speculative-changes-output", "Speculative decoding changes the output at temperature 0",
        (r"speculative[^.\n]{0,80}(diverg|differ|chang|not identical|wrong)",
         r"(draft model|draft-model|-md |ngram|lookup decoding)[^.\n]{0,60}(diverg|differ|chang)"),
        ("drafted tokens accepted without the target's verification (a benchmarking switch such as llama-server "
         "--spec-synth-rates, or a broken acceptance rule)",
         "verification batches computing other numbers than one-token decoding (near ties only)"),
        ("EPT045",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT045",),
        "serve without the draft and compare; `llmdoctor diff URL_A URL_B` compares the two servers",
        ("ml-explore/mlx-lm#1423", "ml-explore/mlx-lm#1470")),
    Signature(
        "prompt-cache-changes-logprobs", "A warm prompt cache gives other logprobs than a cold one",
        (r"(prompt|prefix)[ _-]?cach[^.\n]{0,80}(differ|chang|mismatch|diverg)",
         r"(warm|cold)[^.\n]{0,40}(cache)[^.\n]{0,60}(differ|chang|mismatch)", r"cache_prompt"),
        ("the cached prefix and the recomputed suffix summed in other batch shapes than a cold prefill "
         "(scores move; a near tie can flip)",
         "a prefix cache that reuses state it should not (a real difference)"),
        ("EPT084",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT084",),
        "send the same request with the cache off once and on twice (llama.cpp: cache_prompt false/true)",
        ("ggml-org/llama.cpp#28368",)),
)


INCIDENTS: tuple[Signature, ...] = FILES + CHAT + SERVING
