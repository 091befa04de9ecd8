"""Serves exported models over TensorFlow Serving's REST and gRPC APIs.

    keras-transformer serve --model classifier=exported_models/classifier \
        --model translator=exported_models/translator --port 8501

    curl -s localhost:8501/v1/models/translator:predict \
        -d '{"instances": ["Y dijo Dios: Sea la luz."]}'

Each `--model NAME=PATH` serves the newest version folder under PATH and
switches to a newer one when it appears, without dropping requests.
`--model-config-file` reads TensorFlow Serving's model config file instead
(version policies and labels); see docs/serving.md.
"""

import argparse
import dataclasses
import logging
import os
import socket
import sys


def parse_model(text):
    from keras_transformer.serving.model_config import check_model_name

    name, separator, path = text.partition("=")
    if not separator or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    reason = check_model_name(name)
    if reason:
        raise argparse.ArgumentTypeError(reason)
    return name, path


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


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer serve", description=__doc__.split("\n")[0]
    )
    _add_model_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=8500,
        help="port of TensorFlow Serving's gRPC API (PredictionService, ModelService) on --host; "
        "0 turns it off",
    )
    _add_request_arguments(parser)
    _add_connection_arguments(parser)
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    return parser


def _add_model_arguments(parser):
    """What is served: the models and how often to look for their new versions, their
    signatures, the explorer page."""
    models = parser.add_mutually_exclusive_group(required=True)
    models.add_argument(
        "--model",
        action="append",
        type=parse_model,
        metavar="NAME=PATH",
        help="a model name and its base path (repeatable); serves its newest version",
    )
    models.add_argument(
        "--model-config-file",
        metavar="PATH",
        help="TensorFlow Serving's model config file (model_config_list in protobuf text "
        "format: name, base_path, model_version_policy, version_labels per model)",
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
        help="serve the attention explorer, a web page at / that sends a text to a model and "
        "draws its answer and attention weights; also makes every model's `attention` "
        "signature public, at most 4 examples a request, and a translator's `translate` "
        "(the decoding the page chooses)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=1.0,
        help="how often to look for new versions (0: never)",
    )


def _add_request_arguments(parser):
    """Limits on a request, and how requests are batched and queued."""
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20)
    parser.add_argument(
        "--max-instances", type=int, default=256, help="most examples in one request"
    )
    parser.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="run every request on its own instead of merging concurrent ones",
    )
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument(
        "--batch-timeout-ms",
        type=float,
        default=5.0,
        help="how long a batch waits for company once a model thread is free; "
        "only while other requests to its signature are running",
    )
    parser.add_argument("--num-threads", type=int, default=2, help="model calls running at once")
    parser.add_argument(
        "--max-queued-examples",
        type=int,
        default=256,
        help="most examples waiting for a model call, per model version and signature; a "
        "request that would go past it gets 503 at once (a request into an empty queue is "
        "always taken). Counted in examples, not requests, because a request's cost grows "
        "with its examples. The default is a queue that even a slow model works off well inside "
        "--request-timeout, so admitted requests get answers rather than 504s",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a predict request may take once its body is read; past it the client "
        "gets 504, and work whose batch had not started is dropped (TensorFlow Serving's "
        "--rest_api_timeout_in_ms is 30 s too)",
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
    """The `ModelConfig`s that --model or --model-config-file, --signatures and --explorer
    ask for; exits with a message naming what is wrong."""
    from keras_transformer.export.controls import CONTROLLED_SIGNATURE
    from keras_transformer.serving.explorer import ATTENTION_SIGNATURE
    from keras_transformer.serving.model_config import (
        ModelConfigError,
        model_configs,
        read_model_config_file,
        with_signatures,
    )

    try:
        if args.model_config_file:
            configs = read_model_config_file(args.model_config_file)
        else:
            names = [name for name, _ in args.model]
            if len(set(names)) != len(names):
                sys.exit(f"error: a model name is given twice: {names}")
            for name, path in args.model:
                if not os.path.isdir(path):
                    sys.exit(f"error: model {name!r}: no folder at {path}")
            configs = model_configs(dict(args.model))
        signatures = [name for names in args.signatures for name in names.split(",")]
        if args.explorer:
            signatures.append(ATTENTION_SIGNATURE)
        configs = with_signatures(configs, signatures)
        if args.explorer:
            # Only translators have it: a classifier without it is no mistake to log.
            configs = [
                dataclasses.replace(
                    config,
                    optional_signatures=(*config.optional_signatures, CONTROLLED_SIGNATURE),
                )
                for config in configs
            ]
        return configs
    except ModelConfigError as error:
        sys.exit(f"error: {error}")


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    configs = served_models(args)
    check_arguments(args)

    from keras_transformer.serving import ModelRepository, create_app
    from keras_transformer.serving.http_server import ConnectionSettings, build_server, run_server

    repository = ModelRepository(configs, poll_seconds=args.poll_seconds)
    settings = server_settings(args)
    connections = ConnectionSettings(
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        idle_timeout=args.idle_timeout,
        max_connections=args.max_connections,
        shutdown_grace=args.shutdown_grace,
    )
    if args.explorer:
        host = f"[{args.host}]" if ":" in args.host else args.host
        logging.getLogger("keras_transformer.serving").info(
            "Attention explorer at http://%s:%d/", host, args.port
        )
    app = create_app(repository, settings)
    run_server(build_server(app, args.host, args.port, connections, args.log_level))


def check_arguments(args):
    """Exits with a message if a number among `args` is out of its range, or the gRPC
    port cannot be listened on."""
    for value, flag in (
        (args.max_body_bytes, "--max-body-bytes"),
        (args.max_instances, "--max-instances"),
        (args.max_batch_size, "--max-batch-size"),
        (args.num_threads, "--num-threads"),
    ):
        if value < 1:
            sys.exit(f"error: {flag} must be at least 1, got {value}")
    for value, flag in (
        (args.header_timeout, "--header-timeout"),
        (args.body_timeout, "--body-timeout"),
        (args.idle_timeout, "--idle-timeout"),
        (args.shutdown_grace, "--shutdown-grace"),
    ):
        if not 0 < value < float("inf"):
            sys.exit(f"error: {flag} must be a positive number of seconds, got {value:g}")
    if args.max_connections < 1:
        sys.exit(f"error: --max-connections must be at least 1, got {args.max_connections}")
    for value, flag in ((args.port, "--port"), (args.grpc_port, "--grpc-port")):
        if not 0 <= value <= 65535:
            sys.exit(f"error: {flag} must be between 0 and 65535, got {value}")
    if args.grpc_port and args.grpc_port == args.port:
        sys.exit(f"error: --grpc-port and --port are both {args.port}")
    if args.grpc_port and (problem := cannot_listen(args.host, args.grpc_port)):
        sys.exit(f"error: --grpc-port {args.grpc_port}: cannot listen on {args.host}: {problem}")
    if args.max_queued_examples < 1:
        sys.exit(f"error: --max-queued-examples must be at least 1, got {args.max_queued_examples}")
    if not 0 < args.request_timeout < float("inf"):
        sys.exit(
            "error: --request-timeout must be a finite number of seconds above 0, "
            f"got {args.request_timeout}"
        )
    if args.max_response_bytes < 1:
        sys.exit(f"error: --max-response-bytes must be at least 1, got {args.max_response_bytes}")


def server_settings(args):
    """The `ServerSettings` that `args` ask for."""
    from keras_transformer.serving import ServerSettings
    from keras_transformer.serving.explorer import ATTENTION_MAX_INSTANCES, ATTENTION_SIGNATURE

    return ServerSettings(
        max_body_bytes=args.max_body_bytes,
        max_instances=args.max_instances,
        batching=args.batching,
        max_batch_size=args.max_batch_size,
        batch_timeout_ms=args.batch_timeout_ms,
        num_threads=args.num_threads,
        max_queued_examples=args.max_queued_examples,
        request_timeout=args.request_timeout,
        max_response_bytes=args.max_response_bytes,
        grpc_port=args.grpc_port,
        grpc_host=args.host,
        explorer=args.explorer,
        signature_max_instances=(
            {ATTENTION_SIGNATURE: ATTENTION_MAX_INSTANCES} if args.explorer else None
        ),
    )


if __name__ == "__main__":
    main()
