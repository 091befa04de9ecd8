"""PNG plots: confusion matrices, learning curves, attention maps, position encodings.

Every figure is a `matplotlib.figure.Figure` drawn on its own Agg canvas, so
nothing here touches pyplot or the global matplotlib backend: a user who chose
an interactive backend keeps it. Each public `plot_*` function writes a PNG to
`path` (creating parent folders), releases the figure and returns the path as
a string. The `_*_figure` helpers build the figure without saving it (tests
count its axes).
"""

import math
import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

DPI = 120
_MAX_ATTENTION_COLUMNS = 4


def plot_confusion_matrix(matrix, class_names, path, title="Confusion matrix", normalize=True):
    """Confusion matrix heatmap; rows = true class, columns = predicted class.

    `matrix` holds counts `[n, n]`. Each cell is annotated with its count; with
    `normalize=True` the color (and a second annotation line) is the fraction
    of the row, i.e. of that true class, so classes of different sizes compare.
    """
    figure = _confusion_matrix_figure(matrix, class_names, title=title, normalize=normalize)
    return _save(figure, path)


def plot_learning_curves(history, path, title="Learning curves"):
    """Per-epoch curves from a Keras `History.history` dict (or a `History`).

    One panel per metric family: `loss` with `val_loss`, `accuracy` with
    `val_accuracy`, and one for every other key (e.g. `learning_rate`).
    Epochs are numbered from 1.
    """
    figure = _learning_curves_figure(history, title=title)
    return _save(figure, path)


def plot_attention(weights, query_tokens, key_tokens, path, title=None, head_names=None):
    """Attention weights `[heads, T, S]` (or `[T, S]`), one heatmap per head.

    Query tokens label the rows (y axis), key tokens the columns (x axis);
    all heads share one color scale and one colorbar.
    """
    figure = _attention_figure(
        weights, query_tokens, key_tokens, title=title, head_names=head_names
    )
    return _save(figure, path)


def plot_positional_encoding(encodings, path, title="Positional encoding"):
    """Heatmap of position encodings `[positions, d]`."""
    figure = _positional_encoding_figure(encodings, title=title)
    return _save(figure, path)


# --------------------------------------------------------------------------- #
# Figure builders


def _confusion_matrix_figure(matrix, class_names, title="Confusion matrix", normalize=True):
    counts = np.asarray(matrix)
    names = _labels(class_names)
    n = len(names)
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1]:
        raise ValueError(f"Confusion matrix must be square [n, n]; got shape {counts.shape}.")
    if counts.shape[0] != n:
        raise ValueError(
            f"Confusion matrix is {counts.shape[0]}x{counts.shape[1]} but there are "
            f"{n} class names."
        )
    if n == 0:
        raise ValueError("Confusion matrix needs at least one class.")
    counts = counts.astype(np.float64)
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ValueError("Confusion matrix counts must be finite and non-negative.")

    if normalize:
        row_totals = counts.sum(axis=1, keepdims=True)
        colors = np.divide(counts, row_totals, out=np.zeros_like(counts), where=row_totals > 0)
        vmax, color_label = 1.0, "Fraction of true class"
    else:
        colors = counts
        vmax, color_label = max(float(counts.max()), 1.0), "Count"

    side = float(np.clip(0.55 * n + 2.5, 4.5, 16.0))
    figure = _new_figure((side + 1.0, side))
    axes = figure.add_subplot()
    image = axes.imshow(colors, cmap="Blues", vmin=0.0, vmax=vmax, interpolation="nearest")
    colorbar = figure.colorbar(image, ax=axes, shrink=0.8)
    colorbar.set_label(color_label)

    tick_size = _tick_font_size(n, side - 2.0, largest=10.0)
    axes.set_xticks(range(n))
    axes.set_yticks(range(n))
    axes.set_yticklabels(names, fontsize=tick_size)
    _set_x_tick_labels(axes, names, tick_size)
    axes.set_xlabel("Predicted label")
    axes.set_ylabel("True label")
    axes.set_title(title)

    if n <= 30:
        cell_size = float(np.clip(tick_size, 5.0, 10.0))
        for row in range(n):
            for column in range(n):
                text = _format_count(counts[row, column])
                if normalize:
                    text += f"\n{colors[row, column]:.2f}"
                dark = colors[row, column] > 0.55 * vmax
                axes.text(
                    column,
                    row,
                    text,
                    ha="center",
                    va="center",
                    fontsize=cell_size,
                    color="white" if dark else "black",
                )
    return figure


def _learning_curves_figure(history, title="Learning curves"):
    history = getattr(history, "history", history)
    if not isinstance(history, dict) or not history:
        raise ValueError("History is empty: expected a dict like keras History.history.")
    series = {}
    for key, values in history.items():
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.size:
            series[str(key)] = values
    if not series:
        raise ValueError("History has no values: every metric list is empty.")

    families = []
    for key in series:
        family = key[len("val_") :] if key.startswith("val_") else key
        if family not in families:
            families.append(family)

    columns = min(len(families), 3)
    rows = math.ceil(len(families) / columns)
    figure = _new_figure((4.6 * columns, 3.6 * rows))
    grid = figure.subplots(rows, columns, squeeze=False).reshape(-1)
    for axes in grid[len(families) :]:
        axes.remove()

    for axes, family in zip(grid, families):
        for key, label, style in ((family, "train", "-"), ("val_" + family, "validation", "--")):
            if key not in series:
                continue
            values = series[key]
            epochs = np.arange(1, values.size + 1)
            marker = "o" if values.size <= 40 else None
            axes.plot(epochs, values, style, marker=marker, markersize=4, label=label)
        if family in ("learning_rate", "lr"):
            finite = np.concatenate([series[k] for k in (family, "val_" + family) if k in series])
            finite = finite[np.isfinite(finite)]
            if finite.size and finite.min() > 0 and finite.max() / finite.min() > 20:
                axes.set_yscale("log")
        axes.set_title(family.replace("_", " "))
        axes.set_xlabel("Epoch")
        axes.set_ylabel(family.replace("_", " "))
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    return figure


def _checked_attention(weights, query_tokens, key_tokens, head_names):
    """`(weights [heads, T, S] float64, query labels, key labels, head names)`, or a
    ValueError saying which argument does not fit the weights."""
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim == 2:
        weights = weights[None]
    if weights.ndim != 3:
        raise ValueError(
            f"Attention weights must be [heads, T, S] or [T, S]; got shape {weights.shape}. "
            "For a batch, pass one example's weights (weights[i])."
        )
    heads, query_length, key_length = weights.shape
    queries, keys = _labels(query_tokens), _labels(key_tokens)
    if len(queries) != query_length:
        raise ValueError(
            f"query_tokens has {len(queries)} tokens but the weights have T={query_length} "
            f"query positions (shape {weights.shape})."
        )
    if len(keys) != key_length:
        raise ValueError(
            f"key_tokens has {len(keys)} tokens but the weights have S={key_length} "
            f"key positions (shape {weights.shape})."
        )
    if heads == 0 or query_length == 0 or key_length == 0:
        raise ValueError(f"Attention weights are empty (shape {weights.shape}).")
    if head_names is None:
        head_names = [f"head {index}" for index in range(heads)]
    head_names = _labels(head_names)
    if len(head_names) != heads:
        raise ValueError(f"head_names has {len(head_names)} names for {heads} heads.")
    return weights, queries, keys, head_names


def _attention_figure(weights, query_tokens, key_tokens, title=None, head_names=None):
    weights, queries, keys, head_names = _checked_attention(
        weights, query_tokens, key_tokens, head_names
    )
    heads, query_length, key_length = weights.shape
    columns = min(heads, _MAX_ATTENTION_COLUMNS)
    rows = math.ceil(heads / columns)
    panel_width = float(np.clip(0.16 * key_length + 1.2, 3.0, 7.0))
    panel_height = float(np.clip(0.16 * query_length + 1.2, 3.0, 7.0))
    figure = _new_figure(
        (panel_width * columns + 1.2, panel_height * rows + (0.5 if title else 0.0))
    )
    grid = figure.subplots(rows, columns, squeeze=False).reshape(-1)
    for axes in grid[heads:]:
        axes.remove()
    grid = grid[:heads]

    finite = weights[np.isfinite(weights)]
    vmin = min(0.0, float(finite.min())) if finite.size else 0.0
    vmax = float(finite.max()) if finite.size else 1.0
    vmax = vmax if vmax > vmin else vmin + 1.0
    x_size = _tick_font_size(key_length, panel_width - 1.0)
    y_size = _tick_font_size(query_length, panel_height - 1.0)

    image = None
    for index, (axes, name) in enumerate(zip(grid, head_names)):
        image = axes.imshow(
            weights[index],
            cmap="viridis",
            vmin=vmin,
            vmax=vmax,
            aspect="auto",
            interpolation="nearest",
        )
        axes.set_title(name)
        axes.set_xticks(range(key_length))
        axes.set_yticks(range(query_length))
        first_column = index % columns == 0
        bottom_of_column = index + columns >= heads
        if first_column:
            axes.set_yticklabels(queries, fontsize=y_size)
            axes.set_ylabel("Query")
        else:
            axes.set_yticklabels([])
        if bottom_of_column:
            axes.set_xticklabels(keys, fontsize=x_size, rotation=90)
            axes.set_xlabel("Key")
        else:
            axes.set_xticklabels([])
        axes.tick_params(length=2)
    colorbar = figure.colorbar(image, ax=list(grid), shrink=0.8)
    colorbar.set_label("Attention weight")
    if title:
        figure.suptitle(title)
    return figure


def _positional_encoding_figure(encodings, title="Positional encoding"):
    encodings = np.asarray(encodings, dtype=np.float64)
    if encodings.ndim == 3 and encodings.shape[0] == 1:
        encodings = encodings[0]
    if encodings.ndim != 2 or 0 in encodings.shape:
        raise ValueError(f"Encodings must be [positions, d]; got shape {encodings.shape}.")
    figure = _new_figure((8.0, 5.0))
    axes = figure.add_subplot()
    finite = np.abs(encodings[np.isfinite(encodings)])
    limit = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    image = axes.imshow(
        encodings, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest"
    )
    figure.colorbar(image, ax=axes).set_label("Value")
    axes.set_xlabel("Encoding dimension")
    axes.set_ylabel("Position")
    axes.set_title(title)
    return figure


# --------------------------------------------------------------------------- #
# Helpers


def _new_figure(size):
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path):
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    try:
        figure.savefig(path, dpi=DPI, format="png")
    finally:
        figure.clear()
    return path


def _labels(items):
    """Token / class names as strings (bytes from tf.string tensors decoded)."""
    if hasattr(items, "numpy"):
        items = items.numpy()
    if not isinstance(items, (list, tuple)):
        items = np.asarray(items, dtype=object).reshape(-1).tolist()
    labels = []
    for item in items:
        if isinstance(item, bytes):
            item = item.decode("utf-8", errors="replace")
        labels.append(str(item))
    return labels


def _tick_font_size(count, inches, largest=9.0, smallest=3.0):
    """A font size (points) that fits `count` tick labels along `inches`."""
    inches = max(inches, 1.0)
    return float(np.clip(0.8 * 72.0 * inches / max(count, 1), smallest, largest))


def _set_x_tick_labels(axes, labels, size):
    longest = max((len(label) for label in labels), default=0)
    if longest > 3 or len(labels) > 12:
        axes.set_xticklabels(labels, fontsize=size, rotation=45, ha="right", rotation_mode="anchor")
    else:
        axes.set_xticklabels(labels, fontsize=size)


def _format_count(value):
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"
