"""`transformer`: the encoder-decoder of Vaswani et al., with its search in the graph.

Source ids -> embedding (x sqrt(d_model)) + positions -> `layers` encoder layers (self-attention,
feed-forward) -> the decoder's cross-attention; target ids (<s> first) -> embedding + positions ->
`layers` decoder layers (causal self-attention, cross-attention, feed-forward) -> logits over the
target vocabulary (the target embedding transposed, with `tied_output`).

Outside training the model also searches (beam search, greedy with `modeler.beam_size: 1`), with a
cache of keys and values so a step costs one position, not the whole prefix: the val phase scores
BLEU on what the model really produces, and the exported model translates raw text alone.
See `_transformer.py`.

Variable names: `transformer/encoder/layer_<i>/{self_attention,feed_forward}/...`,
`transformer/decoder/layer_<i>/{self_attention,cross_attention,feed_forward}/...`,
`source_embedding`, `target_embedding` (or `shared_embedding`), `output_projection`.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem

PARAMS: dict[str, dict[str, Any]] = {
    "layers": {"description": "Encoder layers, and as many decoder layers.", "type": "integer", "minimum": 1,
               "default": 6},
    "d_model": {"description": "Width of every token's vector (embeddings, attention, layer outputs).",
                "type": "integer", "minimum": 2, "default": 512},
    "heads": {"description": "Attention heads per attention layer; must divide d_model.", "type": "integer",
              "minimum": 1, "default": 8},
    "ff": {"description": "Inner width of each feed-forward block.", "type": "integer", "minimum": 1, "default": 2048},
    "dropout": {"description": "Dropout of the embeddings, attention outputs and feed-forward blocks while training.",
                "type": "number", "minimum": 0.0, "exclusiveMaximum": 1.0, "default": 0.1},
    "norm": {"description": ("Where each block's layer normalisation sits: pre (before the block, steadier to train) "
                             "or post (after the residual sum, as in Vaswani et al.)."),
             "enum": ["pre", "post"], "default": "pre"},
    "shared_embeddings": {"description": ("One embedding table for source and target (needs "
                                          "inputter.shared_vocabulary: true)."),
                          "type": "boolean", "default": False},
    "tied_output": {"description": "The output projection is the target embedding transposed (fewer weights).",
                    "type": "boolean", "default": True},
    "positions": {"description": "Position encoding: sinusoidal (fixed, any length) or learned (one vector per position).",
                  "enum": ["sinusoidal", "learned"], "default": "sinusoidal"},
}


def heads_problem(params: dict[str, Any]) -> str | None:
    """What is wrong with heads and d_model, or None: each head takes d_model / heads dimensions."""
    heads, width = params.get("heads", 8), params.get("d_model", 512)
    if isinstance(heads, int) and isinstance(width, int) and heads > 0 and width % heads:
        return (f"{heads} heads do not divide d_model {width}; each head takes d_model / heads dimensions: "
                f"pick heads among {_divisors(width)}")
    return None


def check_sections(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """`dslrun validate`: heads divide d_model; shared embeddings need one vocabulary."""
    problems = []
    if (problem := heads_problem(section)) is not None:
        problems.append(Problem(("heads",), problem))
    inputter = declared.pipeline.get("inputter") or {}
    if section.get("shared_embeddings") and inputter.get("shared_vocabulary") is False:
        problems.append(Problem(("shared_embeddings",), "one embedding table for both sides needs one vocabulary, "
                                "but inputter.shared_vocabulary is false ({other}); set it true, or "
                                "shared_embeddings: false", ("inputter", "shared_vocabulary")))
    return problems


def _divisors(number: int) -> str:
    return ", ".join(str(k) for k in range(1, min(number, 64) + 1) if number % k == 0)


@register("network", "transformer", params=PARAMS, rules=[check_sections], batch=("sentence", "translation"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """Transformer encoder-decoder (pre/post norm, tied embeddings), beam search with a key/value cache.

    {"source", "target"} ids -> {"logits"} (and {"tokens"} outside training), variables created.
    """
    import tensorflow as tf

    from dsl.tasks.machine_translation._transformer import Transformer

    if (problem := heads_problem(params)) is not None:
        raise DslError(f"network.heads: {problem}")
    source_size = context.vocabulary_size
    target_size = context.fact("target_vocabulary_size")
    if source_size is None or target_size is None:
        raise DslError("the transformer network reads sentence pairs, but the inputter reports no SentencePiece "
                       "vocabulary; use the parallel_text inputter")
    if params["shared_embeddings"] and source_size != target_size:
        raise DslError("network.shared_embeddings: true needs one vocabulary for both sides; set "
                       "inputter.shared_vocabulary: true")
    max_length = int(context.fact("max_length"))
    search = context.fact("decoding") or {}
    model = Transformer(
        source_vocabulary_size=int(source_size), target_vocabulary_size=int(target_size),
        bos_id=int(context.fact("bos_id", 2)), eos_id=int(context.fact("eos_id", 3)), max_length=max_length + 1,
        layers=params["layers"], d_model=params["d_model"], heads=params["heads"], ff=params["ff"],
        dropout=params["dropout"], norm=params["norm"], shared_embeddings=params["shared_embeddings"],
        tied_output=params["tied_output"], positions=params["positions"],
        beam_size=int(search.get("beam_size") or 4), length_penalty=float(search.get("length_penalty", 0.6)),
        max_decode_length=int(search.get("max_decode_length") or max_length),
    )
    zeros = tf.zeros([1, max_length + 1], tf.int32)
    # Creates every variable (the search uses the same layers); teacher forcing only: a search on zeros
    # would run max_decode_length eager steps for nothing (seconds for a large model).
    model({"source": zeros, "target": zeros}, training=True)
    return model
