"""Where and how a training run computes: mixed precision, XLA, tf.distribute.

* Mixed precision: the model is built under Keras' `mixed_float16` or
  `mixed_bfloat16` dtype policy (`dtype_policy`); variables stay float32, the
  layers compute in the low precision (softmax, layer norm and the classifier's
  head in float32). Under `mixed_float16`, `model.compile` wraps the optimizer
  in a `keras.optimizers.LossScaleOptimizer` itself.
* XLA: `jit_compile=True` in `model.compile` (`compile_with_xla`); always on JAX,
  whose op-by-op execution is several times slower than its compiled step.
* Distribution (`make_strategy`): `"mirrored"` is `tf.distribute.MirroredStrategy`
  over this machine's GPUs (one replica on a CPU-only machine), trained with
  `model.fit`; `"multi_worker"` is `tf.distribute.MultiWorkerMirroredStrategy`
  over the machines named in the `TF_CONFIG` environment variable, trained with
  `fit_multi_worker`, because Keras 3's `fit` fails under that strategy
  ("Attempt to convert a value (PerReplica...)", keras-team/keras#20585).
  In both, `--batch-size` is the global batch, split over all replicas.
  `"data_parallel"` is Keras' own `keras.distribution.DataParallel` over every
  device JAX sees (JAX backend only): variables replicated, each batch split
  over the devices; it is in effect while the model is built and while it is
  fitted, and the previous global distribution is restored after each.
  Training batches are cut to a multiple of the devices, validation runs
  outside the distribution (`_data_parallel_inputs`).

TensorFlow is imported where a strategy or `tf.data` needs it: without a
strategy, on JAX, this module needs no TensorFlow.
"""

import contextlib
import json
import os
import shutil
import tempfile

import keras
import numpy as np

from keras_transformer.training.batching import as_tf_dataset

# `--mixed-precision` value -> Keras dtype policy.
MIXED_PRECISION_POLICIES = {
    "off": "float32",
    "float16": "mixed_float16",
    "bfloat16": "mixed_bfloat16",
}
DISTRIBUTE_CHOICES = ("none", "mirrored", "multi_worker", "data_parallel")

TF_CONFIG_EXAMPLE = (
    'TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
    '"task": {"type": "worker", "index": 0}}\''
)


def check_mixed_precision(mixed_precision):
    """Raises ValueError unless `mixed_precision` is one of `MIXED_PRECISION_POLICIES`."""
    if mixed_precision not in MIXED_PRECISION_POLICIES:
        raise ValueError(
            f"`mixed_precision` must be one of {', '.join(MIXED_PRECISION_POLICIES)}, "
            f"got {mixed_precision!r}."
        )
    return mixed_precision


@contextlib.contextmanager
def dtype_policy(mixed_precision):
    """Keras' global dtype policy for `mixed_precision` (`"off"`, `"float16"`,
    `"bfloat16"`) inside the block, the previous one after it.

    Build the model inside: its layers keep the policy they were built with,
    and nothing else in the process (the tests, a later model) inherits it.
    """
    check_mixed_precision(mixed_precision)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(MIXED_PRECISION_POLICIES[mixed_precision])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def compile_with_xla(jit_compile):
    """`model.compile`'s `jit_compile` for the `--jit-compile` setting: as set on
    TensorFlow, always on JAX (Keras' own default there)."""
    return bool(jit_compile) or keras.backend.backend() == "jax"


def check_jit_compile(distribute, jit_compile):
    """Raises ValueError for XLA with `"multi_worker"`: the replicated step holds the
    cross-worker all-reduce, which XLA does not compile (on CPU TensorFlow 2.21 raises
    "No registered 'CollectiveGatherV2' OpKernel for XLA_CPU_JIT devices")."""
    if jit_compile and distribute == "multi_worker":
        raise ValueError(
            "--jit-compile does not work with --distribute multi_worker: XLA cannot compile the "
            "all-reduce between workers inside the training step. Drop --jit-compile, or use "
            "--distribute mirrored on one machine."
        )


def read_tf_config(environ=None):
    """`TF_CONFIG` (the cluster of a multi-worker run) as a dict, checked.

    Raises ValueError, saying what is wrong and what is expected, when it is
    unset, not JSON, or does not name this process as one of its workers.
    """
    text = (os.environ if environ is None else environ).get("TF_CONFIG", "").strip()
    if not text:
        raise ValueError(
            "--distribute multi_worker needs the TF_CONFIG environment variable: the cluster's "
            f"workers and this process's place among them, e.g. {TF_CONFIG_EXAMPLE}."
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {text!r}.") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ValueError(f'TF_CONFIG needs a "cluster" and a "task", e.g. {TF_CONFIG_EXAMPLE}.')
    task_type, index = task.get("type"), task.get("index")
    if task_type not in ("worker", "chief"):
        raise ValueError(f'TF_CONFIG\'s task type must be "worker" or "chief", got {task_type!r}.')
    addresses = cluster.get(task_type)
    if not isinstance(addresses, list) or not addresses:
        raise ValueError(f"TF_CONFIG's cluster has no {task_type!r} list of host:port addresses.")
    if not isinstance(index, int) or not 0 <= index < len(addresses):
        raise ValueError(
            f"TF_CONFIG's task index must be 0 to {len(addresses) - 1} for its {len(addresses)} "
            f"{task_type}(s), got {index!r}."
        )
    return config


def make_strategy(distribute):
    """The `tf.distribute.Strategy` for `distribute` (`DISTRIBUTE_CHOICES`), or None for `"none"`;
    for `"data_parallel"`, a `keras.distribution.DataParallel` (`data_parallel_distribution`).

    Call it before any TensorFlow op runs in the process: a
    MultiWorkerMirroredStrategy must configure the runtime's collective ops at
    program startup (TensorFlow raises otherwise).
    """
    if distribute not in DISTRIBUTE_CHOICES:
        raise ValueError(
            f"`distribute` must be one of {', '.join(DISTRIBUTE_CHOICES)}, got {distribute!r}."
        )
    if distribute == "none":
        return None
    if distribute == "data_parallel":
        return data_parallel_distribution()
    import tensorflow as tf

    if distribute == "mirrored":
        return tf.distribute.MirroredStrategy()
    read_tf_config()
    try:
        # AUTO: NCCL between GPUs, ring all-reduce over gRPC on CPUs.
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.AUTO
            )
        )
    except RuntimeError as error:  # "Collective ops must be configured at program startup"
        raise ValueError(
            f"Cannot start a multi-worker run in this process ({error}): create the strategy "
            "before TensorFlow runs anything, e.g. run the app in a fresh process."
        ) from None


def data_parallel_distribution():
    """`keras.distribution.DataParallel` over every device JAX sees: its GPUs (or TPUs), else
    its CPUs.

    Raises ValueError on another backend: Keras' distribution API runs on JAX only.
    """
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            "--distribute data_parallel needs the JAX backend (KERAS_BACKEND=jax); Keras' "
            f"distribution API does not run on {backend}. On TensorFlow use --distribute mirrored."
        )
    return keras.distribution.DataParallel(devices=keras.distribution.list_devices())


def is_data_parallel(strategy):
    return isinstance(strategy, keras.distribution.DataParallel)


def data_parallel_devices(distribution):
    """The devices of a `DataParallel`, e.g. ["gpu:0", "gpu:1"]."""
    return [str(device) for device in distribution.device_mesh.devices.flat]


def check_batch_size(strategy, batch_size):
    """Raises ValueError when a `DataParallel` cannot split `batch_size` evenly over its devices
    (JAX shards a batch only in equal parts)."""
    if batch_size is None or not is_data_parallel(strategy):
        return
    devices = len(data_parallel_devices(strategy))
    if batch_size % devices:
        raise ValueError(
            f"--batch-size {batch_size} does not split evenly over the {devices} devices of "
            f"--distribute data_parallel: use a multiple of {devices}."
        )


def is_multi_worker(strategy):
    if strategy is None or is_data_parallel(strategy):
        return False
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def is_chief(strategy):
    """Whether this process writes the run folder and the export: always, except
    on the workers of a multi-worker run other than the chief (worker 0, or the
    `chief` task when TF_CONFIG names one)."""
    return strategy is None or is_data_parallel(strategy) or strategy.extended.should_checkpoint


def worker_name(strategy):
    """ "worker N" of a multi-worker run, for messages."""
    resolver = strategy.cluster_resolver
    return f"{resolver.task_type} {resolver.task_id}"


def describe_strategy(strategy):
    """E.g. "MirroredStrategy: 2 replicas (GPU:0, GPU:1)", on a worker of a
    multi-worker run "MultiWorkerMirroredStrategy: 4 replicas; this is worker 1",
    or "Data parallel over 2 devices: gpu:0, gpu:1"."""
    if is_data_parallel(strategy):
        devices = data_parallel_devices(strategy)
        plural = "s" if len(devices) != 1 else ""
        return f"Data parallel over {len(devices)} device{plural}: {', '.join(devices)}"
    replicas = strategy.num_replicas_in_sync
    # MultiWorkerMirroredStrategy objects are of its implementation class,
    # CollectiveAllReduceStrategy.
    name = "MultiWorkerMirroredStrategy" if is_multi_worker(strategy) else type(strategy).__name__
    text = f"{name}: {replicas} replica{'s' if replicas != 1 else ''}"
    if is_multi_worker(strategy):
        return f"{text}; this is {worker_name(strategy)}"
    devices = [device.rsplit("device:", 1)[-1] for device in strategy.extended.worker_devices]
    return f"{text} ({', '.join(devices)})"


def strategy_scope(strategy):
    """`strategy.scope()`, or no scope for None: models and optimizers are created in it.

    A `DataParallel`'s scope makes it Keras' global distribution inside the
    block only, so its variables are replicated over its devices and later
    models in the process are not.
    """
    return contextlib.nullcontext() if strategy is None else strategy.scope()


@contextlib.contextmanager
def worker_run_dir(run_dir, strategy, resume=False):
    """The folder this process writes its run folder to.

    The chief writes `run_dir`. The other workers of a multi-worker run write
    the same files (checkpoints, backup, logs) to a temporary folder, removed
    afterwards, MultiWorkerMirroredStrategy's usual convention: they run the
    same callbacks, which must agree step by step, without overwriting the
    chief's files. To `resume`, that folder starts as a copy of `run_dir`
    (settings, vocabularies, backup), which every worker must then see (a
    shared file system, or workers on one machine); `fit_multi_worker` stops
    with an error if a worker would start at another epoch than the chief.
    """
    if is_chief(strategy):
        yield os.fspath(run_dir)
        return
    scratch = tempfile.mkdtemp(
        prefix=f"keras_transformer_{worker_name(strategy).replace(' ', '')}_"
    )
    if resume and os.path.isdir(run_dir):
        try:
            shutil.copytree(run_dir, scratch, dirs_exist_ok=True)
        except (OSError, shutil.Error):
            pass  # the chief started afresh meanwhile; the epoch check catches any disagreement
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def local_copy(model):
    """A copy of a (multi-worker) distributed `model` with plain variables and the same weights.

    Evaluating, decoding and exporting after a multi-worker run is the
    chief's business alone; a model whose variables live in a
    MultiWorkerMirroredStrategy would turn every `predict` into a collective
    that all workers must join.
    """
    copy = model.__class__.from_config(model.get_config())
    build_config = model.get_build_config()
    if build_config:
        copy.build_from_config(build_config)
    copy.set_weights(model.get_weights())
    return copy


def fit(
    model,
    strategy,
    train_dataset,
    validation_dataset,
    epochs,
    steps_per_epoch=None,
    callbacks=(),
    verbose=1,
):
    """`model.fit` on one machine, `fit_multi_worker` across several; returns
    the model to evaluate and save (a local copy after multi-worker training).

    The datasets reshuffle themselves, seeded, so `fit` does not shuffle.
    On TensorFlow, `ArrayBatches` go in as `tf.data` (`as_tf_dataset`).
    """
    if keras.backend.backend() == "tensorflow":
        train_dataset, validation_dataset = (
            as_tf_dataset(train_dataset),
            as_tf_dataset(validation_dataset),
        )
    if is_multi_worker(strategy):
        fit_multi_worker(
            model,
            strategy,
            train_dataset,
            validation_dataset,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=callbacks,
            verbose=verbose,
        )
        return local_copy(model)
    if is_data_parallel(strategy):
        train_dataset, validation_dataset, callbacks = _data_parallel_inputs(
            strategy, train_dataset, validation_dataset, callbacks
        )
    with fitting_scope(strategy):
        model.fit(
            train_dataset,
            validation_data=validation_dataset,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            shuffle=False,
            callbacks=callbacks,
            verbose=verbose,
        )
    return model


@contextlib.contextmanager
def fitting_scope(strategy):
    """Where `model.fit` runs: a `DataParallel`'s scope, since Keras splits each batch
    over its devices only while it is the global distribution; else no scope.

    JAX splits a batch only in equal parts: a batch it cannot split (one `fit`
    could not cut to fit, see `_data_parallel_inputs`) becomes a ValueError
    that says so, rather than JAX's sharding arithmetic.
    """
    if not is_data_parallel(strategy):
        yield
        return
    try:
        with strategy.scope():
            yield
    except ValueError as error:
        if type(error).__name__ != "IndivisibleError":  # jax._src.sharding's, not public
            raise
        devices = len(data_parallel_devices(strategy))
        raise ValueError(
            f"--distribute data_parallel could not split a batch evenly over its {devices} "
            f"devices ({error}). Training batches given as a keras.utils.PyDataset are cut to "
            "fit; these were not. Train on one device (--distribute none), or with data and a "
            f"--batch-size that make every batch a multiple of {devices}."
        ) from None


def _data_parallel_inputs(distribution, train_dataset, validation_dataset, callbacks):
    """`fit`'s data and callbacks under a `DataParallel`, whose devices JAX splits every batch over
    in equal parts: training batches cut to fit (`SplittableBatches`), where they are a
    `keras.utils.PyDataset`; validation outside the distribution, on any batches
    (`ValidateOutsideDistribution`, first among the callbacks)."""
    if isinstance(train_dataset, keras.utils.PyDataset):
        train_dataset = SplittableBatches(train_dataset, len(data_parallel_devices(distribution)))
    if validation_dataset is not None:
        callbacks = [ValidateOutsideDistribution(validation_dataset), *callbacks]
    return train_dataset, None, callbacks


class SplittableBatches(keras.utils.PyDataset):
    """A PyDataset's batches, each with a multiple of `devices` rows so JAX can split it evenly.

    Only batches smaller than the rest change (the last of an epoch, those at
    the ends of length buckets). One of `devices` rows or more loses its last
    rows beyond a multiple of `devices` (at most `devices - 1`, other ones
    each epoch when the batches are reshuffled), as `drop_remainder` would
    drop them. A smaller one is repeated whole up to a multiple of
    `devices`, which leaves its mean loss and gradient as they were.
    """

    def __init__(self, batches, devices):
        # As the batches underneath load (PyDataset's defaults where they never set them).
        super().__init__(
            workers=getattr(batches, "workers", 1),
            use_multiprocessing=getattr(batches, "use_multiprocessing", False),
            max_queue_size=getattr(batches, "max_queue_size", 10),
        )
        self.batches = batches
        self.devices = devices

    def __len__(self):
        return len(self.batches)

    @property
    def num_batches(self):
        return self.batches.num_batches

    def __getitem__(self, index):
        batch = self.batches[index]
        rows = len(keras.tree.flatten(batch)[0])
        if rows >= self.devices:
            taken = np.arange(rows - rows % self.devices)
        else:
            taken = np.tile(np.arange(rows), self.devices // np.gcd(rows, self.devices))
        return keras.tree.map_structure(
            lambda array: None if array is None else array[taken], batch
        )

    def on_epoch_begin(self):
        self.batches.on_epoch_begin()

    def on_epoch_end(self):
        self.batches.on_epoch_end()


class ValidateOutsideDistribution(keras.callbacks.Callback):
    """`fit`'s validation, run by `model.evaluate` outside the global distribution.

    There the batches need not split over the devices (the replicated
    variables compute on every batch as they are), so every validation
    example counts, once. Its `val_` metrics join the epoch's logs before the
    callbacks after it (early stopping, checkpoints, history) read them.
    """

    def __init__(self, validation_dataset):
        super().__init__()
        self.validation_dataset = validation_dataset

    def on_epoch_end(self, epoch, logs=None):
        distribution = keras.distribution.distribution()
        keras.distribution.set_distribution(None)
        try:
            results = self.model.evaluate(self.validation_dataset, verbose=0, return_dict=True)
        finally:
            keras.distribution.set_distribution(distribution)
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in results.items()})


def fit_multi_worker(
    model,
    strategy,
    train_dataset,
    validation_dataset=None,
    epochs=1,
    steps_per_epoch=None,
    callbacks=(),
    verbose=1,
):
    """`model.fit(train_dataset, validation_data=..., ...)` under a MultiWorkerMirroredStrategy.

    The same epochs of the same steps as `fit`: each step runs Keras'
    `model.train_step` on every replica (`strategy.run`), on its share of the
    global batch (the dataset's batches, split over all replicas); gradients
    are summed across workers by the optimizer. The same Keras callbacks see
    the same calls as under `fit` (a `keras.callbacks.CallbackList` with a
    History and, on the chief, a progress bar), so checkpoints, backups for
    `--resume`, CSV and TensorBoard logs, early stopping and time budgets work
    unchanged. Logs are metrics summed over all workers, so every worker sees
    the same values; a stop (early stopping, a time budget) asked for on any
    worker stops them all after the same step, since one left running would
    wait for the others forever.

    Every worker must run the same pipeline (same data, same seed): it is
    sharded by batch (`AutoShardPolicy.DATA`), each worker keeping its part
    of every global batch. Pass `steps_per_epoch` for a repeated dataset
    (one iterator then runs on across epochs); without it each epoch is one
    pass over the dataset.

    Returns the `keras.callbacks.History`.
    """
    if not model.compiled:
        raise ValueError("Compile the model (in `strategy.scope()`) before `fit_multi_worker`.")
    check_jit_compile("multi_worker", model.jit_compile)
    train_dataset, validation_dataset = (
        as_tf_dataset(train_dataset),
        as_tf_dataset(validation_dataset),
    )
    train_batches = _distributed(strategy, train_dataset)
    validation_batches = (
        None if validation_dataset is None else _distributed(strategy, validation_dataset)
    )
    chief = is_chief(strategy)
    steps = steps_per_epoch or int(train_dataset.cardinality())  # for the progress bar
    history = keras.callbacks.History()
    callbacks = keras.callbacks.CallbackList(
        [*callbacks, history],
        add_progbar=chief and verbose != 0,
        verbose=verbose if chief else 0,
        epochs=epochs,
        steps=steps if steps > 0 else None,
        model=model,
    )
    train_step = _replicated_step(strategy, model, model.train_step)
    test_step = _replicated_step(strategy, model, model.test_step)
    any_worker_stops = _stop_vote(strategy, model)

    model.stop_training = False
    if not model.optimizer.built:
        with strategy.scope():
            model.optimizer.build(model.trainable_variables)
    callbacks.on_train_begin()
    initial_epoch = _agreed_initial_epoch(strategy, model._initial_epoch or 0)
    # A finite dataset is iterated afresh each epoch (reshuffled), a repeated
    # one continues across epochs, as under `fit`.
    iterator = iter(train_batches) if steps_per_epoch else None
    logs = None
    for epoch in range(initial_epoch, epochs):
        model.reset_metrics()
        callbacks.on_epoch_begin(epoch)
        if steps_per_epoch:
            batches = (next(iterator) for _ in range(steps_per_epoch))
        else:
            batches = iter(train_batches)
        logs = _train_epoch(batches, train_step, callbacks, any_worker_stops)
        if validation_batches is not None:
            model.reset_metrics()
            logs.update(_validation_logs(validation_batches, test_step, callbacks))
        callbacks.on_epoch_end(epoch, logs)
        if any_worker_stops():
            break
    callbacks.on_train_end(logs)
    return history


def _distributed(strategy, dataset):
    """`dataset` split over the workers by batch: each keeps its part of every global batch."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(dataset.with_options(options))


def _replicated_step(strategy, model, step):
    """A `tf.function` that runs `step` (e.g. `model.train_step`) on every replica, then
    returns the model's metrics summed over all replicas (in the same graph: one round of
    collectives, not one per variable)."""
    import tensorflow as tf

    def run(batch):
        strategy.run(step, args=(batch,))
        return model.get_metrics_result()

    return tf.function(run, reduce_retracing=True)


def _stop_vote(strategy, model):
    """`() -> bool`: whether `model.stop_training` is set on any worker; every worker must
    call it at the same point, as it is a collective."""
    import tensorflow as tf

    @tf.function
    def any_replica(flag):
        votes = strategy.run(lambda value: tf.cast(value, tf.float32), args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None) > 0

    return lambda: bool(any_replica(tf.constant(bool(model.stop_training))))


def _train_epoch(batches, train_step, callbacks, any_worker_stops):
    """Trains on `batches` until they end or a worker stops; returns the epoch's logs (the
    metrics accumulate over the epoch)."""
    logs = {}
    for step, batch in enumerate(batches):
        callbacks.on_train_batch_begin(step)
        logs = _python_floats(train_step(batch))
        callbacks.on_train_batch_end(step, logs)
        if any_worker_stops():
            break
    return dict(logs)


def _validation_logs(batches, test_step, callbacks):
    """The validation metrics over `batches`, named `val_...`."""
    callbacks.on_test_begin()
    logs = {}
    for step, batch in enumerate(batches):
        callbacks.on_test_batch_begin(step)
        logs = _python_floats(test_step(batch))
        callbacks.on_test_batch_end(step, logs)
    callbacks.on_test_end(logs)
    return {f"val_{name}": value for name, value in logs.items()}


def _python_floats(logs):
    return {name: float(value) for name, value in logs.items()}


def _agreed_initial_epoch(strategy, epoch):
    """The chief's first epoch (after a restored backup), checked to be every worker's.

    Raises ValueError on every worker when they differ: a worker that
    restored another backup (or none) would train different weights, and the
    run would end in a hang rather than an error.
    """
    import tensorflow as tf

    @tf.function
    def chief_value_and_mismatch(value):
        def replica(value):
            context = tf.distribute.get_replica_context()
            # The chief's first replica is replica 0 of the whole cluster.
            chief_value = context.all_reduce(
                tf.distribute.ReduceOp.SUM,
                tf.where(context.replica_id_in_sync_group == 0, value, tf.zeros_like(value)),
            )
            mismatch = context.all_reduce(
                tf.distribute.ReduceOp.SUM, tf.cast(value != chief_value, tf.int32)
            )
            return chief_value, mismatch

        chief_value, mismatch = strategy.run(replica, args=(value,))
        return strategy.experimental_local_results(chief_value)[
            0
        ], strategy.experimental_local_results(mismatch)[0]

    chief_epoch, mismatch = chief_value_and_mismatch(tf.constant(epoch, tf.int32))
    if int(mismatch):
        raise ValueError(
            f"The workers would start at different epochs (the chief at epoch {int(chief_epoch)}, "
            f"this process, {worker_name(strategy)}, at {epoch}; one of them found no backup): "
            "every worker must see the same run folder (a shared file system) to --resume a "
            "multi-worker run."
        )
    return int(chief_epoch)
