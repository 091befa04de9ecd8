"""Serves exported models over TensorFlow Serving's REST and gRPC APIs.

    keras-transformer serve --port=8500 --rest_api_port=8501 \
        --model_name=translator --model_base_path=$PWD/exported_models/translator

    curl -s localhost:8501/v1/models/translator:predict \
        -d '{"instances": ["Y dijo Dios: Sea la luz."]}'

TensorFlow Serving's command line (`tensorflow_model_server`'s flags) starts it unchanged,
with the same meanings and defaults: `--port` is the gRPC API's port (8500), the REST API is
off unless `--rest_api_port` is given, batching is off unless `--enable_batching` is. A
TensorFlow Serving flag it does not implement is refused by name. Its own flags add to
them: `--model NAME=PATH` (repeatable) serves several models without a config file. Each
model serves the newest version folder under its base path and switches to a newer one when
it appears, without dropping requests. See docs/serving.md.
"""

import argparse
import dataclasses
import functools
import logging
import os
import socket
import sys

# TensorFlow Serving's flags (tensorflow_model_server's, in its model_servers/main.cc) that
# this server does not implement: each is refused by name, never ignored.
TF_SERVING_FLAGS_NOT_IMPLEMENTED = frozenset(
    {
        "allow_version_labels_for_unavailable_models",
        "enable_grpc_healthcheck_service",
        "enable_per_model_batching_parameters",
        "enable_profiler",
        "enable_serialization_as_tensor_content",
        "enable_signature_method_name_check",
        "flush_filesystem_caches",
        "grpc_channel_arguments",
        "grpc_max_threads",
        "grpc_socket_path",
        "load_retry_interval_micros",
        "max_num_load_retries",
        "mixed_precision",
        "monitoring_config_file",
        "num_load_threads",
        "num_tflite_interpreters_per_pool",
        "num_tflite_pools",
        "num_unload_threads",
        "per_process_gpu_memory_fraction",
        "platform_config_file",
        "prefer_tflite_model",
        "remove_unused_fields_from_bundle_metagraph",
        "rest_api_enable_cors_support",
        "saved_model_tags",
        "skip_initialize_tpu",
        "ssl_config_file",
        "tensorflow_inter_op_parallelism",
        "tensorflow_intra_op_parallelism",
        "tensorflow_session_config_file",
        "tensorflow_session_parallelism",
        "thread_pool_factory_config_file",
        "use_alts_credentials",
        "xla_cpu_compilation_enabled",
        "xla_gpu_compilation_enabled",
    }
)

# The batching settings a --batching_parameters_file may set: {ServerSettings argument:
# (our flag, the file's BatchingParameters field)}.
BATCHING_FLAGS = {
    "max_batch_size": ("--max-batch-size", "max_batch_size"),
    "batch_timeout_ms": ("--batch-timeout-ms", "batch_timeout_micros"),
    "num_threads": ("--num-threads", "num_batch_threads"),
    "max_queued_examples": ("--max-queued-examples", "max_enqueued_batches"),
}


def parse_model(text):
    from keras_transformer.serving.model_config import check_model_name

    name, separator, path = text.partition("=")
    if not separator or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    reason = check_model_name(name)
    if reason:
        raise argparse.ArgumentTypeError(reason)
    return name, path


def parse_flag_bool(text):
    """A boolean flag's value as TensorFlow Serving's flags take it: `true` or `false`."""
    if text not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text == "true"


def cannot_listen(host, port):
    """Why `host:port` cannot be listened on, or None. The gRPC API binds inside
    the app's start, where a failure comes with a traceback; this says it in a line first."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            probe.bind((host, port))
    except OSError as error:
        return error.strerror or str(error)
    return None


class ServeArgumentParser(argparse.ArgumentParser):
    """argparse, refusing by name each TensorFlow Serving flag the server does not implement
    (`--ssl_config_file=...`), where argparse would call it unrecognized."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        for arg in args:
            if arg == "--":
                break
            name = arg[2:].partition("=")[0].replace("-", "_") if arg.startswith("--") else ""
            if name in TF_SERVING_FLAGS_NOT_IMPLEMENTED:
                self.exit(
                    2,
                    f"error: --{name} is a TensorFlow Serving flag that keras-transformer serve "
                    "does not implement\n",
                )
        return super().parse_known_args(args, namespace)


class StoreWithSpelling(argparse.Action):
    """Stores a flag's value, and in `<dest>_flag` which of its spellings gave it, so that
    a message names the flag as it was written (`--grpc-port` or `--port`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", option_string)


def build_parser():
    import keras_transformer

    parser = ServeArgumentParser(
        prog="keras-transformer serve",
        description=__doc__.split("\n")[0],
        # TensorFlow Serving takes no abbreviations: `--port` must not stand for another flag.
        allow_abbrev=False,
    )
    _add_model_arguments(parser)
    _add_port_arguments(parser)
    _add_request_arguments(parser)
    _add_connection_arguments(parser)
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"keras-transformer serve {keras_transformer.__version__}",
    )
    return parser


def _add_model_arguments(parser):
    """What is served: the models and how often to look for their new versions and config,
    their signatures, warm-up, the explorer page."""
    models = parser.add_mutually_exclusive_group()
    models.add_argument(
        "--model",
        action="append",
        type=parse_model,
        metavar="NAME=PATH",
        help="a model name and its base path (repeatable); serves its newest version",
    )
    models.add_argument(
        "--model_config_file",
        "--model-config-file",
        dest="model_config_file",
        metavar="PATH",
        help="TensorFlow Serving's model config file (model_config_list in protobuf text "
        "format: name, base_path, model_version_policy, version_labels per model)",
    )
    parser.add_argument(
        "--model_name",
        default="default",
        help="the name of the model at --model_base_path (default: default)",
    )
    parser.add_argument(
        "--model_base_path",
        metavar="PATH",
        help="one model's base path (the folder of its version folders), served as "
        "--model_name; the same as --model NAME=PATH",
    )
    parser.add_argument(
        "--model_config_file_poll_wait_seconds",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="read --model_config_file again this often, serving the models it then lists "
        "(default 0: read once, at the start)",
    )
    parser.add_argument(
        "--file_system_poll_wait_seconds",
        "--poll-seconds",
        dest="poll_seconds",
        type=float,
        default=1.0,
        action=StoreWithSpelling,
        metavar="SECONDS",
        help="how often to look for new versions (default 1; 0: only at the start)",
    )
    parser.add_argument(
        "--enable_model_warmup",
        nargs="?",
        const=True,
        default=True,
        type=parse_flag_bool,
        metavar="true|false",
        help="replay each new version's assets.extra/tf_serving_warmup_requests (or, without "
        "that file, run each signature once) before it takes requests (default true)",
    )
    parser.add_argument(
        "--num_request_iterations_for_warmup",
        type=int,
        default=1,
        metavar="N",
        help="how many times each warm-up request is replayed (default 1)",
    )
    parser.add_argument(
        "--signatures",
        action="append",
        default=[],
        metavar="NAME[,NAME...]",
        help="signatures served beside serving_default (repeatable); MODEL:NAME for one "
        "model only. An export's other signatures are hidden from every API",
    )
    parser.add_argument(
        "--explorer",
        action="store_true",
        help="serve the attention explorer, a web page at / of the REST API that sends a text "
        "to a model and draws its answer and attention weights; also makes every model's "
        "`attention` signature public, at most 4 examples a request, and a translator's "
        "`translate` (the decoding the page chooses)",
    )
    parser.set_defaults(poll_seconds_flag="--file_system_poll_wait_seconds")


def _add_port_arguments(parser):
    """Where the two APIs listen."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address both APIs listen on (default 127.0.0.1; TensorFlow Serving listens "
        "on every interface, as 0.0.0.0 does)",
    )
    parser.add_argument(
        "--port",
        "--grpc-port",
        dest="grpc_port",
        type=int,
        metavar="PORT",
        default=8500,
        action=StoreWithSpelling,
        help="port of TensorFlow Serving's gRPC API (PredictionService, ModelService); "
        "default 8500, 0 turns it off",
    )
    parser.add_argument(
        "--rest_api_port",
        "--rest-api-port",
        dest="rest_api_port",
        type=int,
        metavar="PORT",
        default=0,
        action=StoreWithSpelling,
        help="port of TensorFlow Serving's REST API (/v1/models/...), /healthz, the metrics "
        "and the explorer; default 0: no REST API, as in TensorFlow Serving",
    )
    parser.set_defaults(grpc_port_flag="--port", rest_api_port_flag="--rest_api_port")


def _add_request_arguments(parser):
    """Limits on a request, and how requests are batched and queued."""
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20)
    parser.add_argument(
        "--max-instances", type=int, default=256, help="most examples in one request"
    )
    parser.add_argument(
        "--enable_batching",
        dest="batching",
        nargs="?",
        const=True,
        default=False,
        type=parse_flag_bool,
        metavar="true|false",
        help="merge concurrent requests to a signature into one model call (default false: "
        "every request runs on its own, as in TensorFlow Serving)",
    )
    parser.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="the same as --enable_batching=false",
    )
    parser.add_argument(
        "--batching_parameters_file",
        metavar="PATH",
        help="TensorFlow Serving's BatchingParameters in protobuf text format (with "
        "--enable_batching): max_batch_size, batch_timeout_micros, num_batch_threads and "
        "max_enqueued_batches set --max-batch-size, --batch-timeout-ms, --num-threads and "
        "--max-queued-examples (batches times max_batch_size)",
    )
    parser.add_argument(
        "--max-batch-size", type=int, help="most examples in one batch (default 64)"
    )
    parser.add_argument(
        "--batch-timeout-ms",
        type=float,
        help="how long a batch waits for company once a model thread is free; "
        "only while other requests to its signature are running (default 5)",
    )
    parser.add_argument("--num-threads", type=int, help="model calls running at once (default 2)")
    parser.add_argument(
        "--max-queued-examples",
        type=int,
        help="most examples waiting for a model call, per model version and signature; a "
        "request that would go past it gets 503 at once (a request into an empty queue is "
        "always taken). Counted in examples, not requests, because a request's cost grows "
        "with its examples. The default, 256, is a queue that even a slow model works off well "
        "inside --request-timeout, so admitted requests get answers rather than 504s",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        help="seconds a predict request may take once its body is read; past it the client "
        "gets 504, and work whose batch had not started is dropped (default 30)",
    )
    parser.add_argument(
        "--rest_api_timeout_in_ms",
        type=int,
        metavar="MS",
        help="--request-timeout in milliseconds, as TensorFlow Serving's flag (default 30000)",
    )
    parser.add_argument(
        "--rest_api_num_threads",
        type=int,
        metavar="N",
        help="threads that parse large REST request bodies and encode large answers, beside "
        "the model threads (default 2; TensorFlow Serving's is 4 per CPU)",
    )
    parser.add_argument(
        "--max-response-bytes",
        type=int,
        default=8 << 20,
        help="largest JSON answer sent; a larger one gets 413 naming its size",
    )


def _add_connection_arguments(parser):
    """Limits on connections, and the stop."""
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a client has to send a request's headers, counted from when its connection "
        "opened or its previous response ended; then the connection is closed",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds a client has to send a request's whole body, counted from its headers' end; "
        "then it gets 408 (or, with a response already started, the connection is closed)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=5.0,
        help="seconds a connection may wait for a request's first byte, new or kept alive; "
        "then it is closed",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        help="most connections open at once; one more is answered 503 and closed",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        help="on SIGTERM or SIGINT: stop accepting, let requests in flight finish, "
        "and exit within this many seconds whatever the clients do",
    )


def served_models(args):
    """`(configs, adjust)`: the `ModelConfig`s that --model, --model_base_path or
    --model_config_file list, with `adjust` (--signatures and --explorer, `adjusted_configs`)
    applied; and `adjust`, for configs read later. Exits with a message naming what is wrong."""
    from keras_transformer.serving.model_config import (
        ModelConfigError,
        check_model_name,
        model_configs,
        read_model_config_file,
    )

    adjust = functools.partial(
        adjusted_configs,
        signatures=[name for names in args.signatures for name in names.split(",")],
        explorer=args.explorer,
    )
    try:
        if args.model_config_file:
            return adjust(read_model_config_file(args.model_config_file)), adjust
        models = list(args.model or [])
        if args.model_base_path:
            if reason := check_model_name(args.model_name):
                sys.exit(f"error: --model_name: {reason}")
            models.append((args.model_name, args.model_base_path))
        names = [name for name, _ in models]
        if len(set(names)) != len(names):
            sys.exit(f"error: a model name is given twice: {names}")
        for name, path in models:
            if not os.path.isdir(path):
                sys.exit(f"error: model {name!r}: no folder at {path}")
        return adjust(model_configs(dict(models))), adjust
    except ModelConfigError as error:
        sys.exit(f"error: {error}")


def adjusted_configs(configs, signatures, explorer):
    """`configs` (`ModelConfig`s) with the `signatures` (`NAME` or `MODEL:NAME`) that
    --signatures makes public, and those --explorer needs when `explorer`. Raises
    ModelConfigError for a signature naming a model that is not among `configs`."""
    from keras_transformer.export.controls import CONTROLLED_SIGNATURE
    from keras_transformer.serving.explorer import ATTENTION_SIGNATURE
    from keras_transformer.serving.model_config import with_signatures

    configs = with_signatures(configs, [*signatures, *([ATTENTION_SIGNATURE] if explorer else [])])
    if explorer:
        # Only translators have it: a classifier without it is no mistake to log.
        configs = [
            dataclasses.replace(
                config,
                optional_signatures=(*config.optional_signatures, CONTROLLED_SIGNATURE),
            )
            for config in configs
        ]
    return configs


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.model or args.model_base_path or args.model_config_file):
        parser.error(
            "one of --model_base_path (with --model_name), --model NAME=PATH or "
            "--model_config_file is required"
        )
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    log = logging.getLogger("keras_transformer.serving")
    ignored_flags(args, log)
    configs, adjust = served_models(args)
    check_arguments(args)
    settings = server_settings(args)

    from keras_transformer.serving import create_app
    from keras_transformer.serving.http_server import ConnectionSettings, build_server, run_server

    repository = model_repository(args, configs, adjust)
    connections = ConnectionSettings(
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        idle_timeout=args.idle_timeout,
        max_connections=args.max_connections,
        shutdown_grace=args.shutdown_grace,
    )
    if not args.rest_api_port:
        log.info("No REST API: --rest_api_port is 0 (TensorFlow Serving's default).")
    elif args.explorer:
        host = f"[{args.host}]" if ":" in args.host else args.host
        log.info("Attention explorer at http://%s:%d/", host, args.rest_api_port)
    app = create_app(repository, settings)
    server = build_server(app, args.host, args.rest_api_port, connections, args.log_level)
    # No listening socket at all without a REST port: the app still starts (models, gRPC)
    # and stops at a signal as with one.
    run_server(server, sockets=None if args.rest_api_port else [])


def ignored_flags(args, log):
    """Logs a warning for each flag TensorFlow Serving accepts but ignores in this command
    line, as it ignores them."""
    if args.model_config_file and args.model_base_path:
        log.warning("--model_base_path and --model_name are ignored: --model_config_file is given.")
    if args.model_config_file_poll_wait_seconds and not args.model_config_file:
        log.warning(
            "--model_config_file_poll_wait_seconds is ignored: there is no --model_config_file."
        )


def model_repository(args, configs, adjust):
    """The `ModelRepository` of `configs` that `args` ask for; `adjust` is applied to the
    configs it reads from --model_config_file later."""
    from keras_transformer.serving import ModelRepository

    return ModelRepository(
        configs,
        poll_seconds=args.poll_seconds,
        config_file=args.model_config_file,
        config_poll_seconds=args.model_config_file_poll_wait_seconds,
        adjust_configs=adjust,
        warm_up=args.num_request_iterations_for_warmup if args.enable_model_warmup else 0,
    )


def check_arguments(args):
    """Exits with a message if a number among `args` is out of its range, the two ports
    clash, or a port cannot be listened on."""
    for value, flag in (
        (args.max_body_bytes, "--max-body-bytes"),
        (args.max_instances, "--max-instances"),
        (args.num_request_iterations_for_warmup, "--num_request_iterations_for_warmup"),
        (args.max_batch_size, "--max-batch-size"),
        (args.num_threads, "--num-threads"),
        (args.max_queued_examples, "--max-queued-examples"),
        (args.max_response_bytes, "--max-response-bytes"),
        (args.max_connections, "--max-connections"),
        (args.rest_api_timeout_in_ms, "--rest_api_timeout_in_ms"),
        (args.rest_api_num_threads, "--rest_api_num_threads"),
    ):
        if value is not None and value < 1:
            sys.exit(f"error: {flag} must be at least 1, got {value}")
    for value, flag in (
        (args.header_timeout, "--header-timeout"),
        (args.body_timeout, "--body-timeout"),
        (args.idle_timeout, "--idle-timeout"),
        (args.shutdown_grace, "--shutdown-grace"),
    ):
        if not 0 < value < float("inf"):
            sys.exit(f"error: {flag} must be a positive number of seconds, got {value:g}")
    for value, flag in (
        (args.poll_seconds, args.poll_seconds_flag),
        (args.model_config_file_poll_wait_seconds, "--model_config_file_poll_wait_seconds"),
        (args.batch_timeout_ms, "--batch-timeout-ms"),
    ):
        if value is not None and not 0 <= value < float("inf"):
            sys.exit(f"error: {flag} must be a finite number at least 0, got {value:g}")
    if args.request_timeout is not None:
        if args.rest_api_timeout_in_ms is not None:
            sys.exit("error: --request-timeout and --rest_api_timeout_in_ms both set the timeout")
        if not 0 < args.request_timeout < float("inf"):
            sys.exit(
                "error: --request-timeout must be a finite number of seconds above 0, "
                f"got {args.request_timeout}"
            )
    _check_ports(args)


def _check_ports(args):
    grpc_flag, rest_flag = args.grpc_port_flag, args.rest_api_port_flag
    for value, flag in ((args.grpc_port, grpc_flag), (args.rest_api_port, rest_flag)):
        if not 0 <= value <= 65535:
            sys.exit(f"error: {flag} must be between 0 and 65535, got {value}")
    if not args.grpc_port and not args.rest_api_port:
        sys.exit(f"error: {grpc_flag} and {rest_flag} are both 0: nothing would listen")
    if args.grpc_port == args.rest_api_port:
        sys.exit(f"error: {grpc_flag} and {rest_flag} are both {args.grpc_port}")
    if args.explorer and not args.rest_api_port:
        sys.exit(f"error: --explorer is a page of the REST API: give {rest_flag} too")
    for port, flag in ((args.grpc_port, grpc_flag), (args.rest_api_port, rest_flag)):
        if port and (problem := cannot_listen(args.host, port)):
            sys.exit(f"error: {flag} {port}: cannot listen on {args.host}: {problem}")


def batching_choices(args):
    """{ServerSettings argument: value} for the batching settings that our flags and
    --batching_parameters_file set; exits with a message naming a mistake."""
    given = {
        setting: getattr(args, setting)
        for setting in BATCHING_FLAGS
        if getattr(args, setting) is not None
    }
    path = args.batching_parameters_file
    if path is None:
        return given
    if not args.batching:
        # TensorFlow Serving refuses it too: the file would change nothing.
        sys.exit("error: --batching_parameters_file needs --enable_batching")
    from keras_transformer.serving import ServerSettings
    from keras_transformer.serving.batching_parameters import (
        BatchingParametersError,
        batching_settings,
        read_batching_parameters,
    )

    try:
        message, text = read_batching_parameters(path)
        from_file = batching_settings(
            message, text, path, given.get("max_batch_size", ServerSettings().max_batch_size)
        )
    except BatchingParametersError as error:
        sys.exit(f"error: {error}")
    for setting in BATCHING_FLAGS:
        if setting in given and setting in from_file:
            flag, field = BATCHING_FLAGS[setting]
            sys.exit(f"error: {flag} and {field} in {path} both set it: give one")
    return {**given, **from_file}


def server_settings(args):
    """The `ServerSettings` that `args` ask for; a setting no flag gives keeps its default."""
    from keras_transformer.serving import ServerSettings
    from keras_transformer.serving.explorer import ATTENTION_MAX_INSTANCES, ATTENTION_SIGNATURE

    optional = batching_choices(args)
    if args.request_timeout is not None:
        optional["request_timeout"] = args.request_timeout
    elif args.rest_api_timeout_in_ms is not None:
        optional["request_timeout"] = args.rest_api_timeout_in_ms / 1000.0
    if args.rest_api_num_threads is not None:
        optional["json_threads"] = args.rest_api_num_threads
    return ServerSettings(
        max_body_bytes=args.max_body_bytes,
        max_instances=args.max_instances,
        batching=args.batching,
        max_response_bytes=args.max_response_bytes,
        grpc_port=args.grpc_port,
        grpc_host=args.host,
        explorer=args.explorer,
        signature_max_instances=(
            {ATTENTION_SIGNATURE: ATTENTION_MAX_INSTANCES} if args.explorer else None
        ),
        **optional,
    )


if __name__ == "__main__":
    main()
