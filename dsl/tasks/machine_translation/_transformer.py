"""An encoder-decoder Transformer (Vaswani et al., 2017) for machine translation, with in-graph
greedy and beam-search decoding.

Token ids: 0 is padding, `bos_id` starts every decoder input, `eos_id` ends every sentence.

Decoding keeps a cache. Translating token by token with a teacher-forced pass per step would run
every layer over the whole prefix again at every step; here each decoder layer keeps the keys
and values of the tokens decoded so far, so a step runs the layers (projections, feed-forward,
output) on its new token only, O(1) in the prefix, and the cross-attention's keys and values of
the encoder output are projected once per sentence (tiled for the beams). The self-attention
cache is a buffer preallocated to `max_decode_length`, written at the step's position and masked
beyond it (a step's attention reads the whole buffer: a cheap dot product per slot): every loop
variable of the `tf.while_loop` keeps a static shape, so the loop traces once inside `tf.function`
with an unknown batch size (a SavedModel signature) and runs eagerly as well.

One attention layer of our own (Dense `query`, `key`, `value` and `output` projections) serves
teacher forcing and cached decoding, so the two paths share their weights by construction.
Attention scores are softmaxed in float32 under a `mixed_float16` policy, with a finite mask
bias: a fully padded source row attends uniformly to its padding instead of giving a NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import tensorflow as tf

NEG = -1e9  # an additive mask: zeroes a softmax weight, and is finite so a fully masked row is not NaN

Cache = tuple[tf.Tensor, tf.Tensor]  # (keys, values), each (N, heads, max_decode_length, depth)


def _padding_bias(tokens: tf.Tensor) -> tf.Tensor:
    """(B, 1, 1, L) bias hiding padded keys; float32 because scores are softmaxed in float32."""
    return tf.cast(tf.equal(tokens, 0), tf.float32)[:, None, None, :] * NEG


def _sinusoids(positions: tf.Tensor, depth: int) -> tf.Tensor:
    """(T, depth) sines then cosines of geometric timescales 1 to 10^4, as in Tensor2Tensor."""
    half = (depth + 1) // 2
    increment = math.log(10000.0) / max(half - 1, 1)
    angles = tf.cast(positions, tf.float32)[:, None] * tf.exp(tf.range(half, dtype=tf.float32) * -increment)[None, :]
    return tf.concat([tf.sin(angles), tf.cos(angles)], axis=1)[:, :depth]


class _Attention(tf.keras.layers.Layer):
    """Multi-head attention whose projections can be applied piecewise, for the decoding caches."""

    def __init__(self, d_model: int, heads: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.heads, self.depth = heads, d_model // heads
        self.query = tf.keras.layers.Dense(d_model, name="query")
        self.key = tf.keras.layers.Dense(d_model, name="key")
        self.value = tf.keras.layers.Dense(d_model, name="value")
        self.projection = tf.keras.layers.Dense(d_model, name="output")

    def _split(self, x: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(x)
        return tf.transpose(tf.reshape(x, [shape[0], shape[1], self.heads, self.depth]), [0, 2, 1, 3])

    def keys_values(self, memory: tf.Tensor) -> Cache:
        """(N, heads, L, depth) keys and values of `memory`: computed once per source when decoding."""
        return self._split(self.key(memory)), self._split(self.value(memory))

    def attend(self, x: tf.Tensor, keys: tf.Tensor, values: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
        query = self._split(self.query(x)) * self.depth**-0.5
        scores = tf.cast(tf.matmul(query, keys, transpose_b=True), tf.float32) + bias
        context = tf.matmul(tf.cast(tf.nn.softmax(scores, axis=-1), values.dtype), values)
        context = tf.transpose(context, [0, 2, 1, 3])
        shape = tf.shape(context)
        return self.projection(tf.reshape(context, [shape[0], shape[1], self.heads * self.depth]))

    def call(self, x: tf.Tensor, memory: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
        return self.attend(x, *self.keys_values(memory), bias)

    def cached(self, x: tf.Tensor, cache: Cache, position: tf.Tensor, bias: tf.Tensor) -> tuple[tf.Tensor, Cache]:
        """Self-attention of one new position (N, 1, D): its key and value go into the buffers at `position`."""
        new_keys, new_values = self.keys_values(x)
        write = tf.equal(tf.range(cache[0].shape[2]), position)[:, None]  # (L, 1), broadcast over (N, H, L, depth)
        keys, values = tf.where(write, new_keys, cache[0]), tf.where(write, new_values, cache[1])
        return self.attend(x, keys, values, bias), (keys, values)


class _FeedForward(tf.keras.layers.Layer):
    def __init__(self, d_model: int, ff: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden = tf.keras.layers.Dense(ff, activation="relu", name="hidden")
        self.projection = tf.keras.layers.Dense(d_model, name="output")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.projection(self.hidden(x))


class _Block(tf.keras.layers.Layer):
    """One encoder layer or, with `cross`, one decoder layer; residual sublayers, pre- or post-norm."""

    def __init__(self, d_model: int, heads: int, ff: int, dropout: float, pre_norm: bool, cross: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pre_norm = pre_norm
        self.self_attention = _Attention(d_model, heads, name="self_attention")
        self.self_attention_norm = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="self_attention_norm")
        if cross:
            self.cross_attention = _Attention(d_model, heads, name="cross_attention")
            self.cross_attention_norm = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="cross_attention_norm")
        self.feed_forward = _FeedForward(d_model, ff, name="feed_forward")
        self.feed_forward_norm = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="feed_forward_norm")
        self.dropout = tf.keras.layers.Dropout(dropout, name="dropout")

    def _residual(self, x: tf.Tensor, norm: Any, sublayer: Callable[[tf.Tensor], tf.Tensor], training: bool) -> tf.Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(norm(x)), training=training)
        return norm(x + self.dropout(sublayer(x), training=training))

    def call(self, x: tf.Tensor, self_bias: tf.Tensor, memory: tf.Tensor | None = None,
             cross_bias: tf.Tensor | None = None, training: bool = False) -> tf.Tensor:
        x = self._residual(x, self.self_attention_norm, lambda h: self.self_attention(h, h, self_bias), training)
        if memory is not None:
            x = self._residual(x, self.cross_attention_norm, lambda h: self.cross_attention(h, memory, cross_bias), training)
        return self._residual(x, self.feed_forward_norm, self.feed_forward, training)

    def step(self, x: tf.Tensor, cache: Cache, position: tf.Tensor, self_bias: tf.Tensor,
             cross: Cache, cross_bias: tf.Tensor) -> tuple[tf.Tensor, Cache]:
        """The decoder layer on one position (N, 1, D), as `call` computes it there with teacher forcing."""
        updated: list[Cache] = []

        def attend_self(h: tf.Tensor) -> tf.Tensor:
            output, new_cache = self.self_attention.cached(h, cache, position, self_bias)
            updated.append(new_cache)
            return output

        x = self._residual(x, self.self_attention_norm, attend_self, False)
        x = self._residual(x, self.cross_attention_norm, lambda h: self.cross_attention.attend(h, *cross, cross_bias), False)
        return self._residual(x, self.feed_forward_norm, self.feed_forward, False), updated[0]


class _Stack(tf.keras.layers.Layer):
    """The encoder or the decoder: `layers` blocks, then a final layer norm in pre-norm mode."""

    def __init__(self, layers: int, d_model: int, heads: int, ff: int, dropout: float, pre_norm: bool, cross: bool,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.blocks = [_Block(d_model, heads, ff, dropout, pre_norm, cross, name=f"layer_{i}") for i in range(layers)]
        self.final_norm = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm") if pre_norm else None

    def finish(self, x: tf.Tensor) -> tf.Tensor:
        return self.final_norm(x) if self.final_norm is not None else x

    def call(self, x: tf.Tensor, self_bias: tf.Tensor, memory: tf.Tensor | None = None,
             cross_bias: tf.Tensor | None = None, training: bool = False) -> tf.Tensor:
        for block in self.blocks:
            x = block(x, self_bias, memory, cross_bias, training=training)
        return self.finish(x)


class _TiedOutput(tf.keras.layers.Layer):
    """The output projection tied to the target embedding: the matrix is the embedding's, the bias is its own."""

    def __init__(self, vocabulary_size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size

    def build(self, input_shape: Any) -> None:
        self.bias = self.add_weight("bias", shape=[self.vocabulary_size], initializer="zeros")
        super().build(input_shape)

    def call(self, x: tf.Tensor, matrix: tf.Tensor) -> tf.Tensor:
        return tf.einsum("btd,vd->btv", x, tf.cast(matrix, x.dtype)) + tf.cast(self.bias, x.dtype)


class Transformer(tf.keras.Model):
    """Encoder-decoder Transformer: teacher-forced logits for training, decoded tokens for validation and serving."""

    def __init__(self, *, source_vocabulary_size: int, target_vocabulary_size: int, bos_id: int, eos_id: int,
                 max_length: int, layers: int = 2, d_model: int = 128, heads: int = 4, ff: int = 512,
                 dropout: float = 0.1, norm: str = "pre", shared_embeddings: bool = False, tied_output: bool = True,
                 positions: str = "sinusoidal", beam_size: int = 4, length_penalty: float = 0.6,
                 max_decode_length: int = 64, name: str = "transformer") -> None:
        if norm not in ("pre", "post"):
            raise ValueError(f"norm must be 'pre' or 'post', not {norm!r}")
        if positions not in ("sinusoidal", "learned"):
            raise ValueError(f"positions must be 'sinusoidal' or 'learned', not {positions!r}")
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
        if shared_embeddings and source_vocabulary_size != target_vocabulary_size:
            raise ValueError(f"shared_embeddings needs one vocabulary for source and target, but the source has "
                             f"{source_vocabulary_size} ids and the target {target_vocabulary_size}")
        if beam_size < 1 or max_decode_length < 1:
            raise ValueError(f"beam_size ({beam_size}) and max_decode_length ({max_decode_length}) must be at least 1")
        super().__init__(name=name)
        self.source_vocabulary_size, self.target_vocabulary_size = source_vocabulary_size, target_vocabulary_size
        self.bos_id, self.eos_id, self.max_length, self.d_model = bos_id, eos_id, max_length, d_model
        self.pre_norm, self.shared_embeddings, self.tied_output = norm == "pre", shared_embeddings, tied_output
        self.beam_size, self.length_penalty, self.max_decode_length = beam_size, length_penalty, max_decode_length

        def embedding(size: int, layer_name: str) -> Any:
            # N(0, d^-1/2) then scaled by sqrt(d): unit-variance inputs, and a sensible tied output projection.
            initializer = tf.keras.initializers.RandomNormal(stddev=d_model**-0.5)
            return tf.keras.layers.Embedding(size, d_model, embeddings_initializer=initializer, name=layer_name)

        if shared_embeddings:
            self.shared_embedding = embedding(source_vocabulary_size, "shared_embedding")
        else:
            self.source_embedding = embedding(source_vocabulary_size, "source_embedding")
            self.target_embedding = embedding(target_vocabulary_size, "target_embedding")
        self.position_table_size = max(max_length, max_decode_length) + 1
        self.source_positions = self.target_positions = None
        if positions == "learned":
            self.source_positions = tf.keras.layers.Embedding(self.position_table_size, d_model, name="source_positions")
            self.target_positions = tf.keras.layers.Embedding(self.position_table_size, d_model, name="target_positions")
        self.embedding_dropout = tf.keras.layers.Dropout(dropout, name="embedding_dropout")
        self.encoder = _Stack(layers, d_model, heads, ff, dropout, self.pre_norm, cross=False, name="encoder")
        self.decoder = _Stack(layers, d_model, heads, ff, dropout, self.pre_norm, cross=True, name="decoder")
        if tied_output:
            self.output_projection = _TiedOutput(target_vocabulary_size, name="output_projection")
        else:
            self.output_projection = tf.keras.layers.Dense(target_vocabulary_size, name="output_projection")

    def _tables(self) -> tuple[Any, Any]:
        if self.shared_embeddings:
            return self.shared_embedding, self.shared_embedding
        return self.source_embedding, self.target_embedding

    def _embed(self, table: Any, positions: Any, tokens: tf.Tensor, start: Any, training: bool) -> tf.Tensor:
        x = table(tokens) * math.sqrt(self.d_model)
        index = tf.range(tf.shape(tokens)[1]) + start
        encoding = _sinusoids(index, self.d_model) if positions is None else positions(index)
        return self.embedding_dropout(x + tf.cast(encoding, x.dtype), training=training)

    def _logits(self, x: tf.Tensor) -> tf.Tensor:
        if self.tied_output:
            logits = self.output_projection(x, self._tables()[1].embeddings)
        else:
            logits = self.output_projection(x)
        return tf.cast(logits, tf.float32)

    def _encode(self, source: tf.Tensor, training: bool) -> tuple[tf.Tensor, tf.Tensor]:
        bias = _padding_bias(source)
        x = self._embed(self._tables()[0], self.source_positions, source, 0, training)
        return self.encoder(x, bias, training=training), bias

    def _teacher_forced(self, target: tf.Tensor, memory: tf.Tensor, source_bias: tf.Tensor, training: bool) -> tf.Tensor:
        length = tf.shape(target)[1]
        causal = (1.0 - tf.linalg.band_part(tf.ones([length, length]), -1, 0)) * NEG
        x = self._embed(self._tables()[1], self.target_positions, target, 0, training)
        return self._logits(self.decoder(x, causal[None, None] + _padding_bias(target), memory, source_bias, training=training))

    def call(self, features: dict[str, tf.Tensor], training: bool = False) -> dict[str, tf.Tensor]:
        """Logits (B, T, V) with a "target" (teacher forcing), and outside training the decoded "tokens" too,
        so validation scores BLEU on one encoder pass."""
        training = bool(training)
        memory, source_bias = self._encode(tf.cast(features["source"], tf.int32), training)
        outputs: dict[str, tf.Tensor] = {}
        if "target" in features:
            outputs["logits"] = self._teacher_forced(tf.cast(features["target"], tf.int32), memory, source_bias, training)
            if training:
                return outputs
        outputs["tokens"] = self._search(memory, source_bias, self.beam_size, self.max_decode_length)
        return outputs

    def decode(self, source: tf.Tensor, beam_size: int | None = None, max_decode_length: int | None = None) -> tf.Tensor:
        """(B, max_decode_length) int32 best translations, without bos and eos, 0 after the end; beam 1 is greedy."""
        source = tf.cast(source, tf.int32)
        if not self.built:  # through __call__, so the variables get the names the builder's first call gives them
            self({"source": source, "target": tf.fill([tf.shape(source)[0], 1], self.bos_id)}, training=True)
        memory, source_bias = self._encode(source, False)
        return self._search(memory, source_bias, beam_size or self.beam_size, max_decode_length or self.max_decode_length)

    def _search(self, memory: tf.Tensor, source_bias: tf.Tensor, beam_size: int, length: int) -> tf.Tensor:
        if self.target_positions is not None and length > self.position_table_size:
            raise ValueError(f"max_decode_length {length} needs more learned positions than the "
                             f"{self.position_table_size} the model has")
        if not self.decoder.built:  # variables are made here, not inside the while loop
            self._teacher_forced(tf.fill([tf.shape(memory)[0], 1], self.bos_id), memory, source_bias, False)
        if beam_size == 1:
            return self._greedy(memory, source_bias, length)
        return self._beam_search(memory, source_bias, beam_size, length)

    def _start(self, memory: tf.Tensor, copies: int, length: int) -> tuple[list[Cache], list[Cache]]:
        """Empty self-attention buffers for `copies` hypotheses per row, and the cross-attention keys/values."""
        rows = tf.shape(memory)[0] * copies
        blocks = self.decoder.blocks
        shape = [rows, blocks[0].self_attention.heads, length, blocks[0].self_attention.depth]
        caches = [(tf.zeros(shape, self.compute_dtype), tf.zeros(shape, self.compute_dtype)) for _ in blocks]
        cross = [block.cross_attention.keys_values(memory) for block in blocks]
        if copies > 1:
            cross = [(tf.repeat(keys, copies, axis=0), tf.repeat(values, copies, axis=0)) for keys, values in cross]
        return caches, cross

    def _step(self, tokens: tf.Tensor, position: tf.Tensor, caches: list[Cache], cross: list[Cache],
              cross_bias: tf.Tensor, length: int) -> tuple[tf.Tensor, list[Cache]]:
        """Log-probabilities (N, V) of the token after `tokens` (N,) at `position`, and the updated caches."""
        x = self._embed(self._tables()[1], self.target_positions, tokens[:, None], position, False)
        self_bias = tf.where(tf.range(length) <= position, 0.0, NEG)[None, None, None, :]
        updated = []
        for block, cache, keys_values in zip(self.decoder.blocks, caches, cross):
            x, cache = block.step(x, cache, position, self_bias, keys_values, cross_bias)
            updated.append(cache)
        log_probs = tf.nn.log_softmax(self._logits(self.decoder.finish(x))[:, 0], axis=-1)
        # Decoding never emits padding (it would read as the end) nor bos (unless it doubles as eos).
        banned = {0} | ({self.bos_id} - {self.eos_id})
        return log_probs + tf.constant([NEG if i in banned else 0.0 for i in range(self.target_vocabulary_size)]), updated

    def _greedy(self, memory: tf.Tensor, source_bias: tf.Tensor, length: int) -> tf.Tensor:
        batch = tf.shape(memory)[0]
        caches, cross = self._start(memory, 1, length)

        def body(i: tf.Tensor, tokens: tf.Tensor, last: tf.Tensor, finished: tf.Tensor, caches: list[Cache]) -> Any:
            log_probs, caches = self._step(last, i, caches, cross, source_bias, length)
            token = tf.where(finished, 0, tf.argmax(log_probs, axis=-1, output_type=tf.int32))
            tokens += tf.one_hot(i, length, dtype=tf.int32)[None] * token[:, None]
            return i + 1, tokens, token, finished | tf.equal(token, self.eos_id), caches

        start = (tf.constant(0), tf.zeros([batch, length], tf.int32), tf.fill([batch], self.bos_id),
                 tf.zeros([batch], tf.bool), caches)
        _, tokens, _, _, _ = tf.while_loop(lambda i, tokens, last, finished, caches: ~tf.reduce_all(finished), body,
                                           start, maximum_iterations=length)
        return tf.where(tf.equal(tokens, self.eos_id), 0, tokens)

    def _beam_search(self, memory: tf.Tensor, source_bias: tf.Tensor, beam: int, length: int) -> tf.Tensor:
        """Beams flattened batch-major to (B * beam); a finished beam extends only with padding, at no cost.

        Beams compete on summed log-probabilities; at the end the GNMT length penalty ((5 + n) / 6) ** alpha
        (n counts the eos) picks the best hypothesis, one cut at max_decode_length counting as finished there,
        as greedy decoding's would: a search that preferred any ended one could return worse than greedy.
        """
        batch, vocabulary = tf.shape(memory)[0], self.target_vocabulary_size
        caches, cross = self._start(memory, beam, length)
        cross_bias = tf.repeat(source_bias, beam, axis=0)
        only_padding = tf.constant([0.0] + [NEG] * (vocabulary - 1))
        row_offsets = tf.range(batch)[:, None] * beam

        def body(i: tf.Tensor, sequences: tf.Tensor, scores: tf.Tensor, finished: tf.Tensor, last: tf.Tensor,
                 caches: list[Cache]) -> Any:
            log_probs, caches = self._step(last, i, caches, cross, cross_bias, length)
            log_probs = tf.where(finished[:, :, None], only_padding, tf.reshape(log_probs, [batch, beam, vocabulary]))
            scores, index = tf.math.top_k(tf.reshape(scores[:, :, None] + log_probs, [batch, beam * vocabulary]), beam)
            origin, token = index // vocabulary, index % vocabulary
            sequences = tf.gather(sequences, origin, batch_dims=1) + tf.one_hot(i, length, dtype=tf.int32) * token[:, :, None]
            finished = tf.gather(finished, origin, batch_dims=1) | tf.equal(token, self.eos_id)
            caches = tf.nest.map_structure(lambda t: tf.gather(t, tf.reshape(origin + row_offsets, [-1])), caches)
            return i + 1, sequences, scores, finished, tf.reshape(token, [-1]), caches

        start = (tf.constant(0), tf.zeros([batch, beam, length], tf.int32),
                 tf.tile(tf.constant([[0.0] + [NEG] * (beam - 1)]), [batch, 1]),  # one live beam to begin with
                 tf.zeros([batch, beam], tf.bool), tf.fill([batch * beam], self.bos_id), caches)
        _, sequences, scores, _, _, _ = tf.while_loop(
            lambda i, sequences, scores, finished, last, caches: ~tf.reduce_all(finished), body, start,
            maximum_iterations=length)
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(sequences, 0), tf.float32), axis=-1)
        penalised = scores / ((5.0 + lengths) / 6.0) ** self.length_penalty
        best = tf.argmax(penalised, axis=-1, output_type=tf.int32)
        tokens = tf.gather(sequences, best, batch_dims=1)
        return tf.where(tf.equal(tokens, self.eos_id), 0, tokens)
