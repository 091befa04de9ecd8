"""Source names: `"prefix"` or `"prefix:argument"`, looked up in a registry.

A registry is a plain dict mapping a prefix (`"bbc"`, `"csv"`, ...) to a loader
function. Each kind of corpus keeps its own registry (classification now,
sentence pairs later) and resolves names through `find_loader`, so the naming
rules and the error for an unknown name are the same everywhere.
"""

from keras_transformer.data.errors import DataError

# A folder of `keras-transformer tokenize` (`keras_transformer.data.tokens`): not
# in any registry, since it holds token ids, not texts; only training reads it.
TOKEN_PREFIX = "tokens"
TOKEN_SOURCE = f"{TOKEN_PREFIX}:DIR"


def split_source_name(name):
    """Splits a source name at its first colon.

    Only the first colon separates, so arguments may hold colons of their own
    (`"tfds:imdb_reviews:1.0.0"`, `"csv:C:/data/news.csv"`).

    Args:
        name: `"prefix"` or `"prefix:argument"`.

    Returns:
        `(prefix, argument)`; `argument` is None when the name has no colon.

    Raises:
        DataError: `name` is not a non-empty string.
    """
    if not isinstance(name, str) or not name:
        raise DataError(f"A data source name must be a non-empty string, got {name!r}.")
    prefix, colon, argument = name.partition(":")
    return prefix, (argument if colon else None)


def find_loader(registry, name, kind):
    """Looks a source name's prefix up in `registry`.

    Args:
        registry: dict mapping prefix -> loader function.
        name: the source name as the user wrote it.
        kind: what the registry holds, for the error message
            (e.g. `"classification data"`).

    Returns:
        `(loader, argument)`: the registered loader and the text after the
        first colon (None when there is none).

    Raises:
        DataError: the prefix is not registered; the message lists the known
            names.
    """
    prefix, argument = split_source_name(name)
    if prefix == TOKEN_PREFIX:
        raise DataError(
            f"{name} names a token folder, which holds tokens rather than texts: "
            f"only the training apps read it (--data {name})."
        )
    if prefix not in registry:
        known = ", ".join(
            [*(describe_source(p, registry[p]) for p in sorted(registry)), TOKEN_SOURCE]
        )
        raise DataError(f"Unknown {kind} source {name!r}. Known sources: {known}.")
    return registry[prefix], argument


def token_folder_path(name):
    """The folder of a `tokens:DIR` source name; None for any other name.

    Raises:
        DataError: `tokens:` without a folder.
    """
    prefix, argument = split_source_name(name)
    if prefix != TOKEN_PREFIX:
        return None
    if not argument:
        raise DataError(
            f"{TOKEN_SOURCE} needs a folder: --data {TOKEN_PREFIX}:DIR, "
            "DIR written by keras-transformer tokenize."
        )
    return argument


def describe_source(prefix, loader):
    """`prefix` plus the argument it takes, e.g. `"csv:PATH"`, from the loader's
    `source_argument` attribute (absent when the source takes no argument)."""
    argument = getattr(loader, "source_argument", None)
    return f"{prefix}:{argument}" if argument else prefix
