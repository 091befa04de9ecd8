"""Helpers of the server tests: the texts they send, the tiny exports' layout,
direct calls of a SavedModel, a real `apps.serve` process, answer comparisons."""

import base64
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CLASS_NAMES = ["business", "sport", "tech"]
VOCABULARY_TEXTS = [
    "the cat sat on the mat",
    "stocks rose sharply today",
    "the team won the final",
    "el perro come pan",
    "la casa es azul",
    "the market fell after the report",
    "a new phone with a faster chip",
    "y dijo dios sea la luz",
] * 4

# Texts the tests send: ordinary ones, the empty text, whitespace, a long one
# (truncated by the tokenizer), words outside the vocabulary, and one that is
# not UTF-8 (sent as {"b64": ...}).
NON_UTF8_TEXT = b"caf\xe9 \xff\xfe la casa"
TEXT_POOL = [
    "",
    " ",
    "\t\n  ",
    "the cat sat on the mat",
    "stocks rose sharply today",
    "the team won the final",
    "el perro come pan",
    "la casa es azul",
    "the market fell after the report",
    "a new phone with a faster chip",
    "y dijo dios sea la luz",
    "cat",
    "the",
    "mat mat mat mat",
    "azul casa la es",
    "rose stocks",
    "won team final the",
    "chip phone new",
    "dios luz",
    "The Cat Sat On The Mat!",
    "stocks, rose; sharply? today.",
    "perro",
    "el",
    "la luz sea",
    "report after the market",
    "zebra quantum xylophone",
    "ñandú café crème brûlée",
    "日本語のテキスト",
    "emoji 🙂 text",
    "123 456 789",
    "the cat " * 40,
    "a",
    "sharply",
    "el perro y la casa",
    "the final team",
    "faster chip today",
    "casa",
    "luz luz",
    "sat on",
    NON_UTF8_TEXT,
]


def text_bytes(text):
    return text if isinstance(text, bytes) else text.encode("utf-8")


def text_json(text):
    """How a client sends a text: a JSON string, or {"b64": ...} when not UTF-8."""
    if isinstance(text, bytes):
        return {"b64": base64.b64encode(text).decode("ascii")}
    return text


@dataclasses.dataclass
class Exports:
    root: str
    classifier: str  # base path: classifier/1
    translator: str  # base path: translator/1
    spare_translator: (
        str  # another translator's version folder (different weights), to publish as a new version
    )

    def version_dir(self, model, version=1):
        return os.path.join(getattr(self, model), str(version))


# The tiny exports, built once per process whichever test folder's fixture asks first.
_BUILT_EXPORTS = []


def build_exports(tmp_path_factory, randomize):
    """`Exports`: a tiny classifier and translator (random weights, `randomize` =
    tests/conftest.py's randomize_weights) exported by the library's own functions,
    and a re-weighted copy of the translator to publish as a new version."""
    if _BUILT_EXPORTS:
        return _BUILT_EXPORTS[0]
    import keras

    from keras_transformer.export.classifier import export_classifier
    from keras_transformer.export.translator import export_translator
    from keras_transformer.export.versions import write_new_version
    from keras_transformer.models import Seq2SeqTransformer, TransformerClassifier
    from keras_transformer.text import WordPieceTokenizer, build_vocabulary, save_vocabulary

    keras.utils.set_random_seed(7)
    root = str(tmp_path_factory.mktemp("serving_exports"))
    vocabulary = save_vocabulary(
        build_vocabulary(VOCABULARY_TEXTS, 80), os.path.join(root, "vocab.txt")
    )
    tokenizer = WordPieceTokenizer(vocabulary)

    classifier = TransformerClassifier(
        tokenizer.vocabulary_size,
        len(CLASS_NAMES),
        sequence_length=16,
        num_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
    )
    classifier.build((None, 16))
    # Larger random weights than the initializers give, so different texts get
    # clearly different probabilities.
    randomize(classifier, seed=1, scale=0.5)
    export_classifier(classifier, tokenizer, CLASS_NAMES, os.path.join(root, "classifier"))

    translator = Seq2SeqTransformer(
        tokenizer.vocabulary_size,
        tokenizer.vocabulary_size,
        sequence_length=12,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
    )
    translator.build()
    randomize(translator, seed=2, scale=0.5)
    first = export_translator(
        translator,
        tokenizer,
        tokenizer,
        os.path.join(root, "translator"),
        max_output_length=8,
        beam_width=2,
    )
    # The same translator with other weights, to publish as a new version.
    spare = write_new_version(
        os.path.join(root, "spare_translator"),
        lambda folder: write_reweighted_copy(first, folder, seed=3),
    )
    _BUILT_EXPORTS.append(
        Exports(root, os.path.join(root, "classifier"), os.path.join(root, "translator"), spare)
    )
    return _BUILT_EXPORTS[0]


def load_direct(version_dir):
    """The SavedModel loaded in this process, as a client of the export would."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    return tf.saved_model.load(version_dir)


def call_direct(loaded, texts, signature="serving_default"):
    """{output name: numpy array} from calling the signature on `texts` (str or bytes)."""
    import tensorflow as tf

    outputs = loaded.signatures[signature](
        text=tf.constant([text_bytes(text) for text in texts], dtype=tf.string)
    )
    return {name: value.numpy() for name, value in outputs.items()}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """`keras-transformer serve` on 127.0.0.1, its REST API on a free port; its stderr goes to a
    log file.

    Its gRPC API is off unless `extra_args` sets `--port` or `--grpc-port` (servers run in
    parallel would otherwise all want the default port). Batching is on (`--enable_batching`)
    unless `extra_args` say `--no-batching` or `--enable_batching=false`."""

    def __init__(self, models, log_path, extra_args=(), startup_timeout=180.0):
        extra_args = list(extra_args)
        if not {"--port", "--grpc-port"} & set(extra_args):
            extra_args += ["--port", "0"]
        # The last of the two spellings given wins, as argparse takes it.
        last = max(
            index for index, arg in enumerate(extra_args) if arg in ("--port", "--grpc-port")
        )
        if not any(arg.startswith(("--no-batching", "--enable_batching")) for arg in extra_args):
            extra_args.append("--enable_batching")
        port = free_port()
        args = ["--rest_api_port", str(port), *extra_args]
        for name, path in models.items():
            args += ["--model", f"{name}={path}"]
        self._start(args, log_path, port, int(extra_args[last + 1]))
        self.wait_healthy(startup_timeout)

    @classmethod
    def with_arguments(cls, args, log_path, rest_port, grpc_port):
        """`keras-transformer serve ARGS`, started with no flag added and not waited for (see
        `wait_healthy`); `rest_port` and `grpc_port` are the ports `args` give (0: none)."""
        server = cls.__new__(cls)
        server._start(list(args), log_path, rest_port, grpc_port)
        return server

    def _start(self, args, log_path, rest_port, grpc_port):
        self.port = rest_port
        self.grpc_port = grpc_port
        self.url = f"http://127.0.0.1:{rest_port}" if rest_port else None
        self.log_path = str(log_path)
        environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "apps.serve", *args],
            cwd=REPO_ROOT,
            env=environment,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_healthy(self, timeout=180.0):
        """Waits until `/healthz` answers 200 or, without a REST API, until the gRPC API
        listens (it starts once the models have loaded); stops the server and raises if not."""
        try:
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"The server exited with status {self.process.returncode}:\n{self.log()}"
                )
            if self._healthy():
                return
            time.sleep(0.25)
        raise RuntimeError(f"The server was not healthy after {timeout:.0f} s:\n{self.log()}")

    def _healthy(self):
        if self.url is None:
            return "gRPC API listening on" in self.log()
        try:
            return httpx.get(self.url + "/healthz", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self):
        if not self._log.closed:  # still running: its handle is open
            self._log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as log_file:
            return log_file.read()

    def stop(self):
        """Terminates the server (kills it if it does not stop); returns its exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
        self._log.close()
        return self.process.returncode


def serve_process(*args):
    """`keras-transformer serve ARGS` run to its end: a `CompletedProcess` (text stderr). For
    arguments it refuses; bounded, since a server that started would be a failure."""
    return subprocess.run(
        [sys.executable, "-m", "apps.serve", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def serve_refusal(*args):
    """What `serve_process(*args)` gives (`.returncode`, `.stderr`), from `apps.serve.main` run
    in this process: a refusal costs no interpreter start and no imports. A refusal is a
    `SystemExit`, whose status and message are what the interpreter would make of it (a string
    is printed to stderr, status 1); arguments that would start a server fail the test."""
    import contextlib
    import io
    from unittest import mock

    import keras_transformer.cli.serve

    def started(server, sockets=None):
        raise AssertionError(f"apps.serve {list(args)} started a server instead of refusing")

    stderr = io.StringIO()
    with (
        mock.patch("keras_transformer.serving.http_server.run_server", started),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            keras_transformer.cli.serve.main(list(args))
        except SystemExit as exit_:
            code = exit_.code
        else:
            raise AssertionError(f"apps.serve {list(args)} returned instead of exiting")
    if code is None or isinstance(code, int):
        return subprocess.CompletedProcess(args, code or 0, "", stderr.getvalue())
    return subprocess.CompletedProcess(args, 1, "", stderr.getvalue() + f"{code}\n")


# The explorer's server, started once per process whichever test folder's fixture asks first.
_EXPLORER_SERVERS = []


def start_explorer_server(exports, tmp_path_factory):
    """`keras-transformer serve --explorer` (a `ServerProcess`) on the exports and a third model,
    `doomed` (a copy of the classifier at `.doomed`, which a browser test takes away): the
    server of tests/browser and of test_explorer.py's check of the flag."""
    if _EXPLORER_SERVERS:
        return _EXPLORER_SERVERS[0]
    folder = tmp_path_factory.mktemp("explorer")
    doomed = folder / "doomed"
    shutil.copytree(exports.classifier, doomed)
    models = {
        "classifier": exports.classifier,
        "translator": exports.translator,
        "doomed": str(doomed),
    }
    process = ServerProcess(models, folder / "server.log", ["--explorer", "--poll-seconds", "0.2"])
    process.doomed = doomed
    _EXPLORER_SERVERS.append(process)
    return process


def start_threads(targets, name):
    """Starts one daemon thread per target: a thread stuck on a hung server
    cannot keep the test process alive after the test has failed."""
    threads = [
        threading.Thread(target=target, name=f"{name}-{index}", daemon=True)
        for index, target in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    return threads


def join_threads(threads, timeout):
    """Waits at most `timeout` seconds in all for `threads`; fails naming those still running."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in threads if thread.is_alive()]
    assert not stuck, f"still running after {timeout:.0f} s: {stuck}"


def publish_copy(version_dir, base_path):
    """Publishes a copy of `version_dir` as the next version under `base_path`
    (atomically, through the library's `write_new_version`); returns its folder."""
    from keras_transformer.export.versions import write_new_version

    return write_new_version(
        base_path, lambda folder: shutil.copytree(version_dir, folder, dirs_exist_ok=True)
    )


def write_reweighted_copy(version_dir, folder, seed, scale=0.5):
    """Writes into `folder` a copy of the SavedModel at `version_dir` whose float
    variables are moved by random normal noise: the same graph and signatures,
    different weights (a fresh export of another random model would cost half
    a minute of tracing on a loaded machine; this costs a fraction of a second)."""
    import tensorflow as tf

    shutil.copytree(version_dir, folder, dirs_exist_ok=True)
    source_prefix = os.path.join(version_dir, "variables", "variables")
    reader = tf.train.load_checkpoint(source_prefix)
    dtypes = reader.get_variable_to_dtype_map()
    rng = np.random.default_rng(seed)
    names, tensors = [], []
    for name in sorted(dtypes):
        value = reader.get_tensor(name)
        if dtypes[name].is_floating:
            value = value + rng.normal(scale=scale, size=np.shape(value)).astype(value.dtype)
        names.append(name)
        tensors.append(tf.constant(value, dtype=dtypes[name]))
    variables_dir = os.path.join(folder, "variables")
    for entry in os.listdir(variables_dir):
        os.remove(os.path.join(variables_dir, entry))
    tf.raw_ops.SaveV2(
        prefix=os.path.join(variables_dir, "variables"),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=tensors,
    )


def assert_classifier_answer(answer, expected, atol=1e-6):
    probabilities, label = expected
    np.testing.assert_allclose(
        np.asarray(answer["probabilities"], dtype=np.float64), probabilities, atol=atol, rtol=0
    )
    assert answer["label"] == label.decode("utf-8")


def fail_on_marked_texts(monkeypatch):
    """Makes every served model fail on two marked texts: `b"bad input"` as a model
    refusing its input (InvalidArgumentError, two lines), `b"server bug"` as a bug
    (RuntimeError); other texts run as before."""
    import tensorflow as tf

    from keras_transformer.serving.repository import ServedVersion

    original = ServedVersion.run

    def failing(self, signature_name, inputs):
        text = inputs["text"][0]
        if text == b"bad input":
            raise tf.errors.InvalidArgumentError(None, None, "the model refuses this\nsecond line")
        if text == b"server bug":
            raise RuntimeError("boom")
        return original(self, signature_name, inputs)

    monkeypatch.setattr(ServedVersion, "run", failing)
