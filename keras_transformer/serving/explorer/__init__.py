"""The attention explorer: a page the server itself serves at `/` (`keras-transformer serve --explorer`).

The page (index.html, explorer.css, explorer.js, shipped in this package and
built by no tool) lists the served models from `GET /explorer/models`, sends
a text to a model's REST `predict` on `serving_default` (on a translator's
`translate`, with the decoding its controls choose, where that is served) and
`attention`, and draws the answer and the attention weights. It talks to
nothing else, so it works offline.
"""

import os

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from keras_transformer.export.controls import CONTROLLED_SIGNATURE
from keras_transformer.export.parts import attention_notice, read_parts
from keras_transformer.serving.protocol import RequestError

ATTENTION_SIGNATURE = "attention"
# A text's attention is layers x heads x tokens x tokens floats: the page asks
# for one text at a time, and another client of the signature (public with
# --explorer) may not ask for a server's worth of them in one request.
ATTENTION_MAX_INSTANCES = 4

_FOLDER = os.path.dirname(os.path.abspath(__file__))
_ASSETS = {
    "explorer.css": "text/css; charset=utf-8",
    "explorer.js": "text/javascript; charset=utf-8",
}
# The page loads only its own assets and talks only to this server.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def explorer_routes(service):
    """The page's routes over `service` (a `PredictionService`)."""
    models = ModelList(service)
    return [
        Route("/", page, methods=["GET"]),
        Route("/explorer/models", models.endpoint, methods=["GET"]),
        Route("/explorer/assets/{name}", asset, methods=["GET"]),
    ]


async def page(request):
    """`GET /`: the page."""
    return Response(_read("index.html"), media_type="text/html; charset=utf-8", headers=_HEADERS)


async def asset(request):
    """`GET /explorer/assets/NAME`: one of the page's stylesheet and script."""
    name = request.path_params["name"]
    if name not in _ASSETS:
        raise RequestError(404, f"No such route: /explorer/assets/{name[:100]}")
    return Response(_read(name), media_type=_ASSETS[name], headers=_HEADERS)


class ModelList:
    """`GET /explorer/models`: a `model_summary` of each model `service` serves, by name."""

    def __init__(self, service):
        self.service = service

    async def endpoint(self, request):
        summaries = [
            model_summary(model) for _, model in sorted(self.service.repository.models.items())
        ]
        return JSONResponse({"models": summaries}, headers={"Cache-Control": "no-store"})


def model_summary(model):
    """What the page needs to know of a `ServedModel`: name, newest version serving
    (None if none), kind (`classifier`, `translator`, or `other` for an export the
    page cannot draw), whether its `attention` signature is served, a
    classifier's class names (index = column of `probabilities`), and a
    translator's `request_controls` (`keras_transformer.export.controls`: the
    signature that takes them, each control's dtype, default and range) where
    that signature is served, else None."""
    served = model.current
    summary = {
        "name": model.name,
        "version": None,
        "kind": None,
        "attention": False,
        "class_names": None,
        "request_controls": None,
    }
    if served is None:
        return summary
    outputs = set(served.outputs.get("serving_default", {}))
    if {"probabilities", "label"} <= outputs:
        kind = "classifier"
    elif "translation" in outputs:
        kind = "translator"
    else:
        kind = "other"
    summary.update(
        version=served.version, kind=kind, attention=ATTENTION_SIGNATURE in served.signatures
    )
    if kind == "classifier":
        summary["class_names"] = _class_names(served.path)
        parts = read_parts(served.path)
        summary["parts"] = parts
        summary["attention_notice"] = attention_notice(parts)
    elif kind == "translator":
        summary["request_controls"] = served.controls.get(CONTROLLED_SIGNATURE)
    return summary


def _class_names(version_dir):
    """The names `export_classifier` writes beside the SavedModel, or None."""
    try:
        with open(
            os.path.join(version_dir, "assets.extra", "class_names.txt"), encoding="utf-8"
        ) as names_file:
            return names_file.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None


def _read(name):
    with open(os.path.join(_FOLDER, name), "rb") as asset_file:
        return asset_file.read()
