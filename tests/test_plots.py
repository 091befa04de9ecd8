"""Plots: valid, non-blank PNGs, the right panels, clear errors, no global backend change."""

import matplotlib
import matplotlib.image
import numpy as np
import pytest

from keras_transformer import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(path):
    with open(path, "rb") as handle:
        assert handle.read(8) == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[2] in (3, 4)
    # Something was drawn: the pixels are not all one color.
    assert image[..., :3].std() > 0.01
    return image


def heatmap_axes(figure):
    """Axes that show an image (colorbar axes hold no image)."""
    return [axes for axes in figure.axes if axes.images]


@pytest.fixture
def backend_unchanged():
    before = matplotlib.get_backend()
    yield
    assert matplotlib.get_backend() == before


# --------------------------------------------------------------------------- #
# Confusion matrix


def test_confusion_matrix_png_and_nested_dirs(tmp_path, backend_unchanged):
    path = tmp_path / "a" / "b" / "confusion.png"
    result = plots.plot_confusion_matrix([[5, 0, 1], [1, 3, 0], [0, 2, 8]], ["x", "y", "z"], path)
    assert result == str(path)
    read_png(path)


def test_confusion_matrix_annotates_counts_and_row_fractions():
    matrix = np.array([[5, 0], [1, 3]])
    figure = plots._confusion_matrix_figure(matrix, ["business", "sport"], normalize=True)
    (axes,) = heatmap_axes(figure)
    texts = {text.get_text() for text in axes.texts}
    # Row 1 has 4 examples: 1/4 = 0.25 predicted as class 0, 3/4 as class 1.
    assert texts == {"5\n1.00", "0\n0.00", "1\n0.25", "3\n0.75"}
    np.testing.assert_allclose(axes.images[0].get_array(), [[1.0, 0.0], [0.25, 0.75]])
    assert [label.get_text() for label in axes.get_yticklabels()] == ["business", "sport"]
    assert axes.get_xlabel() == "Predicted label" and axes.get_ylabel() == "True label"

    raw = plots._confusion_matrix_figure(matrix, ["business", "sport"], normalize=False)
    (axes,) = heatmap_axes(raw)
    assert {text.get_text() for text in axes.texts} == {"5", "0", "1", "3"}
    np.testing.assert_allclose(axes.images[0].get_array(), matrix)


@pytest.mark.parametrize(
    "matrix, names",
    [
        (np.zeros((3, 3)), ["a", "b"]),
        (np.zeros((2, 3)), ["a", "b"]),
        (np.zeros(4), ["a", "b"]),
    ],
)
def test_confusion_matrix_shape_mismatch_raises(tmp_path, matrix, names):
    with pytest.raises(ValueError, match="Confusion matrix"):
        plots.plot_confusion_matrix(matrix, names, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


# --------------------------------------------------------------------------- #
# Learning curves

HISTORY = {
    "loss": [1.2, 0.8, 0.6, 0.5],
    "accuracy": [0.4, 0.6, 0.7, 0.75],
    "val_loss": [1.0, 0.9, 0.85, 0.9],
    "val_accuracy": [0.5, 0.55, 0.6, 0.58],
    "learning_rate": [1e-4, 2e-4, 3e-4, 2.5e-4],
}


def test_learning_curves_png(tmp_path, backend_unchanged):
    read_png(plots.plot_learning_curves(HISTORY, tmp_path / "curves.png"))


def test_learning_curves_one_panel_per_family_with_train_and_validation():
    figure = plots._learning_curves_figure(HISTORY)
    titles = [axes.get_title() for axes in figure.axes]
    assert titles == ["loss", "accuracy", "learning rate"]
    loss_axes = figure.axes[0]
    lines = {line.get_label(): line for line in loss_axes.get_lines()}
    assert set(lines) == {"train", "validation"}
    np.testing.assert_array_equal(lines["train"].get_xdata(), [1, 2, 3, 4])
    np.testing.assert_allclose(lines["validation"].get_ydata(), HISTORY["val_loss"])
    assert len(figure.axes[2].get_lines()) == 1  # no val_learning_rate
    assert loss_axes.get_xlabel() == "Epoch"


def test_learning_curves_single_epoch_draws_markers(tmp_path):
    history = {"loss": [0.7], "val_loss": [0.9]}
    figure = plots._learning_curves_figure(history)
    (axes,) = figure.axes
    for line in axes.get_lines():
        assert line.get_marker() == "o"
        np.testing.assert_array_equal(line.get_xdata(), [1])
    read_png(plots.plot_learning_curves(history, tmp_path / "one.png"))


def test_learning_curves_accepts_a_keras_history_object():
    class History:
        history = {"loss": [1.0, 0.5]}

    assert [axes.get_title() for axes in plots._learning_curves_figure(History()).axes] == ["loss"]


@pytest.mark.parametrize("history", [{}, {"loss": [], "val_loss": []}])
def test_learning_curves_empty_history_raises(tmp_path, history):
    with pytest.raises(ValueError, match="History"):
        plots.plot_learning_curves(history, tmp_path / "empty.png")


# --------------------------------------------------------------------------- #
# Attention


def attention_weights(heads, queries, keys, seed=0):
    logits = np.random.default_rng(seed).normal(size=(heads, queries, keys))
    weights = np.exp(logits)
    return weights / weights.sum(-1, keepdims=True)


def test_attention_png(tmp_path, backend_unchanged):
    weights = attention_weights(2, 4, 5)
    path = plots.plot_attention(
        weights,
        ["the", "cat", "sat", "."],
        ["le", "chat", "s'est", "assis", "."],
        tmp_path / "attention.png",
        title="Cross-attention",
    )
    read_png(path)


@pytest.mark.parametrize("heads, columns", [(1, 1), (3, 3), (6, 4), (8, 4)])
def test_attention_one_heatmap_per_head_in_at_most_four_columns(heads, columns):
    queries, keys = ["a", "b", "c"], ["w", "x", "y", "z"]
    figure = plots._attention_figure(attention_weights(heads, 3, 4), queries, keys)
    panels = heatmap_axes(figure)
    assert len(panels) == heads
    assert len({round(axes.get_position().x0, 3) for axes in panels}) == columns
    # Exactly one colorbar, shared by all heads.
    assert len(figure.axes) == heads + 1
    assert [axes.get_title() for axes in panels] == [f"head {index}" for index in range(heads)]
    assert [label.get_text() for label in panels[0].get_yticklabels()] == queries
    assert [label.get_text() for label in panels[-1].get_xticklabels()] == keys
    assert all(axes.images[0].norm.vmax == panels[0].images[0].norm.vmax for axes in panels)


def test_attention_two_dimensional_weights_and_head_names():
    weights = attention_weights(1, 2, 3)[0]
    figure = plots._attention_figure(
        weights, ["a", "b"], [b"x", b"y", b"z"], head_names=["layer 1"]
    )
    (axes,) = heatmap_axes(figure)
    assert axes.get_title() == "layer 1"
    assert [label.get_text() for label in axes.get_xticklabels()] == ["x", "y", "z"]
    np.testing.assert_allclose(axes.images[0].get_array(), weights)


def test_attention_image_grows_with_heads(tmp_path):
    tokens = ["a", "b", "c"]
    one = read_png(
        plots.plot_attention(attention_weights(1, 3, 3), tokens, tokens, tmp_path / "1.png")
    )
    four = read_png(
        plots.plot_attention(attention_weights(4, 3, 3), tokens, tokens, tmp_path / "4.png")
    )
    assert four.shape[1] > 2 * one.shape[1]


def test_attention_long_sequences_render(tmp_path):
    tokens = [f"tok{index}" for index in range(128)]
    weights = attention_weights(2, 128, 128)
    figure = plots._attention_figure(weights, tokens, tokens)
    sizes = {label.get_fontsize() for label in heatmap_axes(figure)[0].get_yticklabels()}
    assert max(sizes) < 6  # shrunk to fit 128 labels
    read_png(plots._save(figure, tmp_path / "long.png"))


@pytest.mark.parametrize(
    "queries, keys, message",
    [
        (["a", "b"], ["x", "y", "z", "w"], "query_tokens has 2 tokens but .* T=3"),
        (["a", "b", "c"], ["x", "y"], "key_tokens has 2 tokens but .* S=4"),
    ],
)
def test_attention_token_mismatch_raises(tmp_path, queries, keys, message):
    with pytest.raises(ValueError, match=message):
        plots.plot_attention(attention_weights(2, 3, 4), queries, keys, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


def test_attention_bad_rank_and_head_names_raise(tmp_path):
    with pytest.raises(ValueError, match=r"\[heads, T, S\]"):
        plots.plot_attention(np.zeros((1, 2, 3, 4)), ["a"] * 3, ["b"] * 4, tmp_path / "x.png")
    with pytest.raises(ValueError, match="head_names"):
        plots.plot_attention(
            attention_weights(2, 3, 4), ["a"] * 3, ["b"] * 4, tmp_path / "x.png", head_names=["one"]
        )


# --------------------------------------------------------------------------- #
# Positional encoding


def test_positional_encoding_png(tmp_path, backend_unchanged):
    positions = np.arange(50)[:, None]
    rates = 1.0 / 10000 ** (np.arange(0, 32, 2) / 32)
    encodings = np.zeros((50, 32))
    encodings[:, 0::2] = np.sin(positions * rates)
    encodings[:, 1::2] = np.cos(positions * rates)
    read_png(plots.plot_positional_encoding(encodings, tmp_path / "pe.png"))
    (axes,) = heatmap_axes(plots._positional_encoding_figure(encodings))
    np.testing.assert_allclose(axes.images[0].get_array(), encodings)
    assert axes.get_ylabel() == "Position"


def test_positional_encoding_bad_shape_raises(tmp_path):
    with pytest.raises(ValueError, match=r"\[positions, d\]"):
        plots.plot_positional_encoding(np.zeros(8), tmp_path / "pe.png")


def test_user_backend_kept_and_pyplot_never_loaded(tmp_path):
    """In a fresh process whose user chose the SVG backend, plotting keeps it."""
    import os
    import subprocess
    import sys

    script = (
        "import sys, matplotlib\n"
        "from keras_transformer import plots\n"
        f"plots.plot_confusion_matrix([[1, 0], [0, 1]], ['a', 'b'], {str(tmp_path / 'c.png')!r})\n"
        f"plots.plot_attention([[0.5, 0.5]], ['q'], ['k1', 'k2'], {str(tmp_path / 'a.png')!r})\n"
        "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = dict(os.environ, MPLBACKEND="svg")
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == ["svg", "False"]
    read_png(tmp_path / "c.png")
