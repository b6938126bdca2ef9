"""`machine_translation`: label-smoothed cross-entropy over the target tokens, in-graph search, BLEU.

The task of the `transformer` network, whose outputs are a dict: `logits` (B, T, target vocabulary)
of the decoder fed the true target (teacher forcing), and, outside training, `tokens`: the
translation its own search found (beam search, or greedy with `beam_size: 1`), run in the graph
with the decoding settings of this section (they reach the network as the fact `decoding`).

Loss: label-smoothed cross-entropy summed over the non-padding target tokens and divided by the
count of such tokens in the **global** batch (on N replicas each divides by that count / N, so the
averaged gradient is one process's: dsl.engine.global_batch), as detection divides by its positives.
Reported apart: `cross_entropy` (without the smoothing) and `l2_loss` with weight_decay.

Metrics (val and eval): corpus `bleu` and `chrf` (sacrebleu, on detokenised text, over every rank's
sentences gathered), `token_accuracy` and `perplexity` of the teacher-forced decoder.
Predictions and serving: the translation as text (`translation`) and its ids (`tokens`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from dsl.engine.contracts import Modeler
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem
from dsl.modelers.base import TRAINING_PARAMS, BaseModeler

PARAMS: dict[str, dict[str, Any]] = {
    "label_smoothing": {
        "description": "Probability mass spread evenly over the target vocabulary (Szegedy et al.; 0.1 in Vaswani et al.).",
        "type": "number", "minimum": 0.0, "exclusiveMaximum": 1.0, "default": 0.1,
    },
    "beam_size": {
        "description": "Hypotheses the search keeps per sentence at val, eval, predict and export; 1 = greedy decoding.",
        "type": "integer", "minimum": 1, "maximum": 64, "default": 4,
    },
    "length_penalty": {
        "description": ("Beam search's preference for longer hypotheses: scores are divided by ((5 + length) / 6) "
                        "to this power (Wu et al., GNMT); 0 = none."),
        "type": "number", "minimum": 0.0, "default": 0.6,
    },
    "max_decode_length": {
        "description": "Tokens the search may produce per sentence (</s> not counted); null = inputter.max_length.",
        "type": ["integer", "null"], "minimum": 1, "default": None,
    },
    **TRAINING_PARAMS,
}

METRICS = ["token_accuracy", "perplexity", "bleu", "chrf"]


def outputs(params: dict[str, Any]) -> dict[str, list[str]]:
    """What each phase reports, for `dslrun validate`."""
    terms = ["cross_entropy", *(["l2_loss"] if params.get("weight_decay") else [])]
    return {"train": ["loss", *terms, "learning_rate"], "val": ["loss", *terms, *METRICS]}


def check_search(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """`dslrun validate`: the search can produce a sentence as long as the data's; a Transformer warms up."""
    problems = []
    longest, decode = declared.fact("max_length"), section.get("max_decode_length")
    if isinstance(longest, int) and isinstance(decode, int) and decode < longest:
        problems.append(Problem(("max_decode_length",), f"{decode} is below inputter.max_length {longest} ({{other}}): "
                                "the search would cut translations the data holds; raise it or leave it null",
                                declared.where.get("max_length")))
    network = declared.pipeline.get("network") or {}
    schedule = section.get("lr_schedule") or {}
    if network.get("type") == "transformer" and isinstance(schedule, dict) and not schedule.get("warmup_epochs"):
        problems.append(Problem(("lr_schedule",), "a Transformer trained without a warmup often diverges or stalls "
                                "in its first steps (Vaswani et al., Popel and Bojar); set lr_schedule.warmup_epochs "
                                "(e.g. type: inverse_sqrt, warmup_epochs: 2)"))
    return problems


def decoding(params: dict[str, Any]) -> dict[str, Any]:
    """The search settings the network runs with (the fact `decoding`)."""
    return {name: params.get(name, PARAMS[name]["default"]) for name in ("beam_size", "length_penalty", "max_decode_length")}


@register(
    "modeler",
    "machine_translation",
    params=PARAMS,
    outputs=outputs,
    rules=[check_search],
    predict_options={
        "beam_size": {"type": "integer", "minimum": 1, "maximum": 64, "default": None,
                      "help": "Hypotheses the search keeps per sentence, instead of modeler.beam_size (1 = greedy)"},
    },
    batch=("sentence", "translation"),
    facts=lambda params: {"decoding": decoding(params)},
)
def build(params: dict[str, Any], context: BuildContext) -> Modeler:
    """Translation: label-smoothed cross-entropy per target token, beam search in the graph, BLEU and chrF."""
    return TranslationModeler(params, context)


class TranslationModeler(BaseModeler):
    """Loss, metrics, predictions and predict records of a sequence-to-sequence translator.

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (the inputter's `tokenizers`, which the metrics and predictions detokenise with).
    """

    serving_notes: ClassVar[dict[str, str]] = {
        "translation": "the translated sentence, detokenised by the run's SentencePiece model",
        "tokens": "its target ids (SentencePiece id + 1), 0 after the end",
    }

    PARAMS = PARAMS

    def __init__(self, params: dict[str, Any], context: BuildContext) -> None:
        super().__init__(params, context)
        self.tokenizers = context.fact("tokenizers")
        self._scored: Any = None  # the last evaluation's bleu metric, which holds its hypotheses

    def loss_terms(self) -> list[str]:
        return ["cross_entropy", *(["l2_loss"] if self.params["weight_decay"] else [])]

    def loss(self, targets: Any, outputs: Any, model: Any) -> dict[str, Any]:
        """{'loss': smoothed cross-entropy per global target token + l2_loss, each part, and the
        tokens they were divided by as the batch's `weight` in a val phase's mean}."""
        import tensorflow as tf

        from dsl.engine.global_batch import count_normaliser

        logits = tf.cast(outputs["logits"], tf.float32)
        real = tf.cast(tf.not_equal(targets, 0), tf.float32)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        nll = -tf.gather(log_probs, targets, axis=-1, batch_dims=2)
        smoothing = self.params["label_smoothing"]
        per_token = (1.0 - smoothing) * nll - smoothing * tf.reduce_mean(log_probs, axis=-1)
        tokens = count_normaliser(tf.reduce_sum(real))
        smoothed = tf.reduce_sum(per_token * real) / tokens
        cross_entropy = tf.reduce_sum(nll * real) / tokens
        l2_loss = self.l2_loss(model)
        return {"loss": smoothed + l2_loss, "cross_entropy": cross_entropy, "l2_loss": l2_loss, "weight": tokens}

    def metrics(self, mode: str) -> dict[str, Any]:
        """BLEU, chrF, token accuracy and perplexity for val/test; none while training (no search runs there)."""
        if mode == "train":
            return {}
        from dsl.tasks.machine_translation._metrics import translation_metrics

        return translation_metrics(self.tokenizers)

    def report(self, metrics: dict[str, Any]) -> dict[str, Any] | None:
        """The evaluation's translations, written by `write_report` once every rank's are scored."""
        self._scored = metrics.get("bleu")
        return {"hypotheses": None} if self._scored is not None else None

    def write_report(self, report: dict[str, Any], folder: Path, mode: str, title: str) -> dict[str, str]:
        """`hypotheses_<mode>.txt` in `folder`: the search's translation of each sentence of `mode`'s data,
        one per line in the data's order (the latest evaluation), and the first few as TensorBoard text."""
        import tensorflow as tf

        from dsl.engine.rundir import atomic_write_text

        hypotheses = list(getattr(self._scored, "hypotheses", []))
        path = Path(folder) / f"hypotheses_{mode}.txt"
        atomic_write_text(path, "".join(f"{line}\n" for line in hypotheses))
        if hypotheses:
            tf.summary.text(f"{mode}/translations", "\n\n".join(hypotheses[:8]))
        return {"hypotheses": str(path)}

    def predictions(self, outputs: Any) -> dict[str, Any]:
        """`tokens` int32 (B, max_decode_length) and, with the run's models, `translation` string (B,)."""
        import tensorflow as tf

        tokens = outputs["tokens"]
        found = {"tokens": tokens}
        if self.tokenizers is not None:
            pieces = tf.RaggedTensor.from_tensor(tokens, padding=0) - 1
            found["translation"] = self.tokenizers.graph_tokenizer("target").detokenize(pieces)
        return found

    def configure_predictions(self, model: Any, options: dict[str, Any]) -> None:
        """`--beam-size`: the search the model runs for these predictions."""
        if options.get("beam_size"):
            model.beam_size = int(options["beam_size"])

    def record(self, source: dict[str, Any], predictions: dict[str, Any], features: Any,
               options: dict[str, Any]) -> dict[str, Any]:
        """`{input..., "translation": text}`."""
        translation = predictions.get("translation")
        if translation is not None:
            text = translation[0].decode("utf-8") if isinstance(translation[0], bytes) else str(translation[0])
        else:
            text = self.tokenizers.decode("target", predictions["tokens"][0]) if self.tokenizers else ""
        return {**source, "translation": text}
