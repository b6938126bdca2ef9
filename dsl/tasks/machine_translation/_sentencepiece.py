"""The SentencePiece models of a translation run: trained on the train split once, kept in the run directory.

A trained translator only means something with the subword vocabulary it was trained on, as a
text classifier with its `vocabulary.json`. The first build trains the models (one shared by both
sides, or one per side) on the train split, or reads the `.model` files the section names, and
the chief writes them to the run directory with the settings they were made with
(`sentencepiece.json`); every later build of the same run (resume, `eval`, `predict`, `export`)
reads them back, and settings that changed since are an error, not a silently different model.

Ids. Every id the network sees is SentencePiece's id + 1, so that 0 is padding whatever the
model says (a SentencePiece model has no padding piece by default, and a user's may have any).
`bos_id`/`eos_id` are the shifted ids of the target model's `<s>` and `</s>`.

Training is deterministic (one thread, a fixed seed, every sentence used): ranks that train at
the same time from the same files get the same model, and only the chief writes it.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsl.engine.rundir import atomic_write_bytes
from dsl.language.errors import DslError

SETTINGS_FILE = "sentencepiece.json"
SIDES = ("source", "target")


def settings_of(params: dict[str, Any]) -> dict[str, Any]:
    """What the models depend on (max_length does not: it only bounds a sentence)."""
    return {"model_type": params["model_type"], "vocab_size": params["vocab_size"],
            "shared_vocabulary": params["shared_vocabulary"], "source_model": params["source_model"],
            "target_model": params["target_model"]}


@dataclass
class Tokenizers:
    """The source and target SentencePiece models (serialized protos; the same bytes when shared)."""

    source_proto: bytes
    target_proto: bytes
    _processors: dict[str, Any] = field(default_factory=dict, repr=False)
    _graph_ops: dict[str, Any] = field(default_factory=dict, repr=False)

    def processor(self, side: str) -> Any:
        """The Python SentencePieceProcessor of `side` (made once)."""
        if side not in self._processors:
            import sentencepiece

            processor = sentencepiece.SentencePieceProcessor()
            processor.LoadFromSerializedProto(self.source_proto if side == "source" else self.target_proto)
            self._processors[side] = processor
        return self._processors[side]

    def vocabulary_size(self, side: str) -> int:
        """Ids of `side` are below this (padding included)."""
        return int(self.processor(side).GetPieceSize()) + 1

    @property
    def bos_id(self) -> int:
        return int(self.processor("target").bos_id()) + 1

    @property
    def eos_id(self) -> int:
        return int(self.processor("target").eos_id()) + 1

    def encode(self, side: str, texts: list[str]) -> list[list[int]]:
        """Shifted ids of each text, without <s> or </s>."""
        return [[piece + 1 for piece in ids] for ids in self.processor(side).EncodeAsIds(texts)]

    def decode(self, side: str, ids: Any) -> str:
        """The text of shifted ids; padding, <s> and what follows </s> dropped."""
        kept = []
        for value in ids:
            value = int(value)
            if value == self.eos_id and side == "target":
                break
            if value > 0 and value != self.bos_id:
                kept.append(value - 1)
        return str(self.processor(side).DecodeIds(kept))

    def graph_tokenizer(self, side: str) -> Any:
        """tensorflow-text's SentencePiece op for `side` (made once, the same object for a shared
        model): what the exported model tokenizes and detokenizes with, serving without Python."""
        key = "shared" if self.source_proto == self.target_proto else side
        if key not in self._graph_ops:
            import tensorflow_text

            proto = self.source_proto if side == "source" else self.target_proto
            self._graph_ops[key] = tensorflow_text.SentencepieceTokenizer(model=proto, out_type="int32")
        return self._graph_ops[key]

    def graph_ops(self) -> list[Any]:
        """Every graph tokenizer made, for the SavedModel to keep."""
        self.graph_tokenizer("source")
        self.graph_tokenizer("target")
        return list(self._graph_ops.values())


def run_tokenizers(params: dict[str, Any], train: tuple[list[str], list[str]] | None, model_dir: Path,
                   is_chief: bool, fresh_start: bool = False) -> Tokenizers:
    """The run directory's models, else the named `.model` files, else models trained on `train`
    (sources, targets); written to the run directory by the chief."""
    settings = settings_of(params)
    saved = None if fresh_start else load(model_dir, settings)
    if saved is not None:
        return saved
    if params["source_model"]:
        tokenizers = _named(params)
    elif train is None:
        raise DslError(f"there are no SentencePiece models in {model_dir} and the inputter has no train data to "
                       "train them on; set inputter.train (or inputter.source_model), or point runner.model_dir "
                       "at a trained run")
    else:
        tokenizers = _trained(params, *train)
    if is_chief:
        save(model_dir, settings, tokenizers)
    return tokenizers


def _named(params: dict[str, Any]) -> Tokenizers:
    protos = []
    for key in ("source_model", "target_model"):
        value = params[key] or params["source_model"]
        where = f"inputter.{key if params[key] else 'source_model'}"
        try:
            proto = Path(value).expanduser().read_bytes()
        except OSError as exc:
            raise DslError(f"{where}: cannot read {value}: {exc.strerror or exc}") from None
        _check_proto(proto, f"{where}: {value}")
        protos.append(proto)
    return Tokenizers(protos[0], protos[1])


def _check_proto(proto: bytes, where: str) -> None:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(proto)
    except (RuntimeError, OSError) as exc:
        raise DslError(f"{where} is not a SentencePiece model ({exc}); name a .model file "
                       "spm_train wrote, or leave it null to train one on inputter.train") from None
    if processor.bos_id() < 0 or processor.eos_id() < 0:
        raise DslError(f"{where} has no <s> or </s> piece (bos_id {processor.bos_id()}, eos_id {processor.eos_id()}); "
                       "the decoder needs both: train the model with bos_id and eos_id set")


def _trained(params: dict[str, Any], sources: list[str], targets: list[str]) -> Tokenizers:
    if params["shared_vocabulary"]:
        proto = train_model(sources + targets, params)
        return Tokenizers(proto, proto)
    return Tokenizers(train_model(sources, params), train_model(targets, params))


def train_model(texts: list[str], params: dict[str, Any]) -> bytes:
    """A SentencePiece model of `texts` (serialized), the same bytes for the same texts and settings."""
    import sentencepiece

    sentencepiece.set_random_generator_seed(0)
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=model, model_type=params["model_type"],
            vocab_size=params["vocab_size"], hard_vocab_limit=False, character_coverage=1.0,
            num_threads=1, shuffle_input_sentence=False, input_sentence_size=0, minloglevel=2,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        )
    except RuntimeError as exc:
        raise DslError(f"SentencePiece could not train on inputter.train: {exc}; lower inputter.vocab_size "
                       "or give it more text") from None
    return model.getvalue()


def load(model_dir: Path, settings: dict[str, Any]) -> Tokenizers | None:
    """The models saved in `model_dir`, or None; an error when they were made with other settings."""
    path = model_dir / SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        made_with, files = saved["settings"], saved["files"]
        protos = [(model_dir / files[side]).read_bytes() for side in SIDES]
        for side, proto in zip(SIDES, protos):
            if hashlib.sha256(proto).hexdigest() != saved["sha256"][side]:
                raise ValueError(f"{files[side]} is not the file that was saved (its digest differs)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DslError(f"cannot read the SentencePiece models of {model_dir} ({path.name}): {exc}; start over with "
                       "--no-resume (or a new runner.model_dir)") from None
    changed = [f"{name} {made_with.get(name)!r} (now {value!r})" for name, value in settings.items()
               if made_with.get(name) != value]
    if changed:
        raise DslError(f"the SentencePiece models in {model_dir} were made with inputter.{', inputter.'.join(changed)}, "
                       "and the model of this run directory was trained on them; set them back, or start over "
                       "with --no-resume (or a new runner.model_dir)")
    return Tokenizers(protos[0], protos[1])


def save(model_dir: Path, settings: dict[str, Any], tokenizers: Tokenizers) -> None:
    """Write the models, then the settings naming them, each atomically: a reader sees all or none."""
    model_dir.mkdir(parents=True, exist_ok=True)
    shared = tokenizers.source_proto == tokenizers.target_proto
    files = {side: "sentencepiece.model" if shared else f"sentencepiece_{side}.model" for side in SIDES}
    protos = {"source": tokenizers.source_proto, "target": tokenizers.target_proto}
    for side in SIDES:
        atomic_write_bytes(model_dir / files[side], protos[side])
    record = {"settings": settings, "files": files,
              "sha256": {side: hashlib.sha256(protos[side]).hexdigest() for side in SIDES}}
    atomic_write_bytes(model_dir / SETTINGS_FILE, (json.dumps(record, indent=1) + "\n").encode())
