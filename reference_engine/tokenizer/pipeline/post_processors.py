"""Post-processors: add the template's special tokens around the encoded ids (tokenizer.json
`post_processor`). Only single sequences are encoded by the engine, so only `single` templates run."""
from __future__ import annotations

from typing import Callable

from reference_engine.tokenizer.pipeline.components import build_component, chain
from reference_engine.errors import ModelDirError, UnsupportedError

PostProcessor = Callable[[list[int]], list[int]]


def template(spec: dict, path: str) -> PostProcessor:
    """TemplateProcessing: e.g. single = [<s>, $A] puts BOS before the sequence."""
    special = {name: entry.get("ids", []) for name, entry in spec.get("special_tokens", {}).items()}
    pieces: list[list[int] | None] = []  # None marks where the sequence goes
    for item in _single_template(spec.get("single", []), path):
        if "SpecialToken" in item:
            name = item["SpecialToken"]["id"]
            if name not in special:
                raise ModelDirError(path, f"TemplateProcessing uses {name!r} without a special_tokens entry")
            pieces.append(list(special[name]))
        elif "Sequence" in item:
            pieces.append(None)
        else:
            raise UnsupportedError(path, f"TemplateProcessing item {item!r} is not supported")

    def run(ids: list[int]) -> list[int]:
        out: list[int] = []
        for piece in pieces:
            out.extend(ids if piece is None else piece)
        return out

    return run


def _single_template(raw, path: str) -> list[dict]:
    """Templates are stored as item lists, or (older files) as strings like "<s> $A"."""
    if isinstance(raw, str):
        raw = raw.split()
    items = []
    for item in raw:
        if isinstance(item, str):
            if item.startswith("$"):
                items.append({"Sequence": {"id": item[1:].split(":")[0] or "A"}})
            else:
                items.append({"SpecialToken": {"id": item.split(":")[0]}})
        else:
            items.append(item)
    return items


def byte_level(spec: dict, path: str) -> PostProcessor:
    return lambda ids: ids  # only trims offsets, which the engine does not track


def bert_like(cls_key: str, sep_key: str):
    def build(spec: dict, path: str) -> PostProcessor:
        cls_id, sep_id = spec[cls_key][1], spec[sep_key][1]
        return lambda ids: [cls_id, *ids, sep_id]

    return build


def sequence(spec: dict, path: str) -> PostProcessor:
    return chain([build_post_processor(s, path) for s in spec.get("processors", [])])


BUILDERS = {"TemplateProcessing": template, "ByteLevel": byte_level, "Sequence": sequence,
            "BertProcessing": bert_like("cls", "sep"), "RobertaProcessing": bert_like("cls", "sep")}


def build_post_processor(spec: dict | None, path: str) -> PostProcessor | None:
    """The post-processor from a tokenizer.json `post_processor` entry (None when absent)."""
    return build_component("post_processor", BUILDERS, spec, path)
