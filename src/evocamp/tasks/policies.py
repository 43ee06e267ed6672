"""Multilayer perceptrons whose weights are one flat solution vector (the digits domain's
classifier, the locomotion domains' policies).

Layout: for each layer in turn, its weight matrix of shape ``(inputs, outputs)`` row by
row, then its biases; ``sizes`` lists the widths from the inputs to the outputs (two
sizes: a linear map).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mlp_size(sizes: Sequence[int]) -> int:
    """Weights and biases of an MLP with layer widths ``sizes`` (inputs first)."""
    return sum(n_in * n_out + n_out for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True))


def lecun_uniform(rng: np.random.Generator, sizes: Sequence[int], count: int) -> np.ndarray:
    """``count`` flat weight vectors drawn as QDax initialises its policies (flax's
    ``Dense`` with ``kernel_init=lecun_uniform()``): every weight of a layer with
    ``inputs`` inputs uniform in ``[-sqrt(3 / inputs), sqrt(3 / inputs)]``, biases 0.

    Parameters
    ----------
    rng : numpy.random.Generator
        The stream to draw from (one draw of ``count`` rows per layer, in layer order).
    sizes : sequence of int
        Layer widths, inputs first, outputs last.
    count : int
        Vectors to draw.

    Returns
    -------
    numpy.ndarray
        ``(count, mlp_size(sizes))`` float64, in the layout of :func:`mlp_layers`.
    """
    weights = np.zeros((count, mlp_size(sizes)))
    start = 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        limit = np.sqrt(3.0 / n_in)
        weights[:, start : start + n_in * n_out] = rng.uniform(
            -limit, limit, size=(count, n_in * n_out)
        )
        start += n_in * n_out + n_out
    return weights


def mlp_layers(weights: np.ndarray, sizes: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``(matrix, biases)`` of every layer: views of the flat ``weights``.

    Parameters
    ----------
    weights : numpy.ndarray
        The flat vector, of length :func:`mlp_size` ``(sizes)``.
    sizes : sequence of int
        Layer widths, inputs first, outputs last.

    Returns
    -------
    list of tuple
        One ``(matrix (inputs, outputs), biases (outputs,))`` per layer.
    """
    layers = []
    start = 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        matrix = weights[start : start + n_in * n_out].reshape(n_in, n_out)
        start += n_in * n_out
        layers.append((matrix, weights[start : start + n_out]))
        start += n_out
    return layers


def mlp_output(
    layers: list[tuple[np.ndarray, np.ndarray]], inputs: np.ndarray, *, squash_output: bool
) -> np.ndarray:
    """The MLP's output for ``inputs`` (one vector or a batch of rows): tanh after every
    hidden layer, and after the last one too when ``squash_output`` (a policy's actions in
    [-1, 1]; logits are left linear)."""
    values = inputs
    for index, (matrix, biases) in enumerate(layers):
        values = values @ matrix + biases
        if squash_output or index < len(layers) - 1:
            values = np.tanh(values)
    return values
