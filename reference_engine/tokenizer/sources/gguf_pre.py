"""llama.cpp's pre-tokenizer table: `tokenizer.ggml.pre` -> the regexes it splits text with and the flags it
implies, transcribed from llama-vocab.cpp (llama_vocab::impl::load and llm_tokenizer_bpe's constructor).

Each regex splits the pieces the previous one produced, keeping both matches and the text between them
(tokenizers' Split with behavior "Isolated"). A name llama.cpp does not know makes it refuse the model;
a missing name falls back to "default" with llama.cpp's "GENERATION QUALITY WILL BE DEGRADED" warning.
Where llama.cpp adapted a tokenizer.json regex to its regex engine (tekken, gpt-4o: no \\p{Lu}/\\p{Ll}), the
adaptation is what is transcribed, so the split is llama.cpp's. Names that need llama.cpp's hand-written
splitters or a non-byte-level vocabulary are listed in NOT_TRANSCRIBED and refused.
"""
from __future__ import annotations

from dataclasses import dataclass

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
JAIS2 = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}")
CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
# a punctuation mark glued to the ASCII word after it, letters with their marks, punctuation runs; literal CR/LF
DEEPSEEK3 = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
             "| ?[\\p{P}\\p{S}]+")
# llama.cpp's stand-in for \p{Lu}* \p{Ll}+ (its regex engine has only \p{L}): a letter that is not a-z, then
# letters that are not A-Z
UPPER, LOWER = r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"
UPPER_M, LOWER_M = r"((?=[\p{L}\p{M}])([^a-z]))", r"((?=[\p{L}\p{M}])([^A-Z]))"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*|\p{{N}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O_TAIL = r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+{CONTRACTIONS}?|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*{CONTRACTIONS}?"
         + GPT4O_TAIL)
GRANITE_EMB_MULTI = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER_M}*{LOWER_M}+{CONTRACTIONS}?"
                     rf"|[^\r\n\p{{L}}\p{{N}}]?{UPPER_M}+{LOWER_M}*{CONTRACTIONS}?" + GPT4O_TAIL)
BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
SEED_CODER = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
EXAONE_MOE = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
              r"|\s*[\r\n]|\s+(?!\S)|\s+")
MINICPM5 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
DEEPSEEK_LLM_LETTERS = (  # escaped: the literal letters would not survive Unicode normalization of the source
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-"
    "\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-"
    "\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-"
    "\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-"
    "\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-"
    "\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+")

REGEXES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "llama3": (LLAMA3,), "dbrx": (LLAMA3,), "chatglm4": (LLAMA3,),
    "deepseek-llm": ("[\r\n]", DEEPSEEK_LLM_LETTERS,
                     "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", r"\s+$",
                     "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}+"),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", GPT2),
    "gpt2": (GPT2,),
    "qwen2": (QWEN2,), "qwen35": (QWEN35,),
    "poro": (r" ?[^(\s|.,!?…。，、।۔،)]+",), "viking": (r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"),
    "jais2": (JAIS2,),
    "deepseek-v3": (r"\p{N}{1,3}", CJK_KANA, DEEPSEEK3 + "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
    "spark2_5": (r"\p{N}{1,3}", CJK_KANA, DEEPSEEK3 + "|[\r\n]|\\s+(?!\\S)|\\s+", r"\p{N}"),
    "tekken": (TEKKEN,), "gpt-4o": (GPT4O,), "granite-emb-multi": (GRANITE_EMB_MULTI,),
    "bailingmoe": (BAILINGMOE,), "seed-coder": (SEED_CODER,), "ufakzeka": (UFAKZEKA,),
    "laguna": (r"[^\n]+|[\n]+", QWEN2), "exaone-moe": (EXAONE_MOE,), "minicpm5": (r"\p{N}{1,3}", MINICPM5),
    "chameleon": (r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", GPT2),
}


@dataclass(frozen=True)
class PreTokenizer:
    regex_kind: str
    ignore_merges: bool = False
    add_bos: bool = False          # llama.cpp's implicit default; tokenizer.ggml.add_bos_token overrides it
    clean_spaces: bool = True


def _entries() -> dict[str, PreTokenizer]:
    table: dict[str, PreTokenizer] = {}

    def put(names: str, kind: str, **flags) -> None:
        for name in names.split():
            table[name] = PreTokenizer(kind, **flags)

    put("default", "default")
    put("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano", "llama3",
        ignore_merges=True, add_bos=True)
    put("deepseek-llm", "deepseek-llm", clean_spaces=False)
    put("deepseek-coder", "deepseek-coder", clean_spaces=False)
    put("falcon", "falcon")
    put("mpt gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert exaone4 "
        "jina-v1-en jina-v2-code roberta-bpe olmo jais", "gpt2")
    put("trillion granite-docling", "gpt2", clean_spaces=False)
    put("starcoder refact codeshell exaone minerva-7b mellum2", "starcoder")
    put("command-r smollm", "starcoder", clean_spaces=False)
    put("qwen2 deepseek-r1-qwen kormo f2llmv2", "qwen2", clean_spaces=False)
    put("megrez stablelm2", "qwen2")
    put("qwen35", "qwen35", clean_spaces=False)
    put("dbrx smaug-bpe", "dbrx")
    put("chatglm-bpe", "chatglm4")
    put("glm4 glm5", "chatglm4", ignore_merges=True)
    put("poro-chat", "poro", clean_spaces=False)
    put("bloom gpt3-finnish", "poro")
    put("viking", "viking", clean_spaces=False)
    put("jais-2", "jais2")
    put("deepseek-v3 hunyuan-dense joyai-llm hy_v4", "deepseek-v3", clean_spaces=False)
    put("spark2_5", "spark2_5", clean_spaces=False)
    put("tekken", "tekken", clean_spaces=False, ignore_merges=True, add_bos=True)
    put("gpt-4o llama4 kanana2 talkie minimax-m2", "gpt-4o", clean_spaces=False)
    put("granite-embed-multi-97m", "granite-emb-multi", clean_spaces=False, ignore_merges=True)
    put("bailingmoe bailingmoe2 llada-moe", "bailingmoe", clean_spaces=False)
    put("seed-coder", "seed-coder", clean_spaces=False)
    put("hunyuan solar-open grok-2", "qwen2", clean_spaces=False)
    put("ufakzeka", "ufakzeka", clean_spaces=False)
    put("laguna", "laguna", clean_spaces=False)
    put("exaone-moe", "exaone-moe")
    put("minicpm5", "minicpm5", ignore_merges=True)
    put("chameleon", "chameleon", clean_spaces=False, add_bos=True)
    return table


PRE_TOKENIZERS = _entries()
# Names llama.cpp knows that are not transcribed: the tokenizer refuses them (UnsupportedError) rather than guess.
# tests/reference_engine/tokenizer/test_gguf_pre_table.py holds this list and the table above to llama-vocab.cpp.
NOT_TRANSCRIBED = {
    "kimi-k2": "llama.cpp splits with hand-written code (unicode.cpp: Han runs, then letters without Han)",
    "afmoe": "llama.cpp groups digits with hand-written code (\\p{AFMoE_digits})",
    "superbpe": "a zero-width lookahead split ((?=(\\d{3})+(?!\\d))) whose std::regex splitting is not reproduced",
    "youtu": "\\p{Lu}/\\p{Ll}/... which llama.cpp's regex engine collapses to any letter (\\p{L})",
    "tiny_aya": "\\p{Lu}/\\p{Ll}/... collapsed to \\p{L} by llama.cpp, and ASCII-only \\d/\\b (std::wregex)",
    "cohere2moe": "as tiny_aya",
    "gemma4": "not GPT-2 byte-level BPE: escaped whitespace (U+2581) and merges over raw UTF-8",
    "granite-embed-multi-311m": "as gemma4",
    "sarvam-moe": "as gemma4",
    "whitespace": "not GPT-2 byte-level BPE: raw UTF-8 pieces split on whitespace",
}


def pre_tokenizer_for(pre: str | None) -> PreTokenizer | None:
    """The entry for a `tokenizer.ggml.pre` value; a missing value is llama.cpp's degraded "default"."""
    if pre is None or pre == "":
        return PreTokenizer("default", clean_spaces=False)
    return PRE_TOKENIZERS.get(pre)
