"""The one exception type for bad data input."""


class DataError(ValueError):
    """A data source could not be read or does not hold usable examples.

    Raised for every problem that is the input's fault rather than a bug: an
    unknown source name, a missing file, a missing column, an empty label, a
    missing optional package, an offline download. The message names what was
    wrong (the path, the column, the columns that do exist, ...), so command-line
    apps can print it as it is, without a traceback.

    It subclasses `ValueError` so that code written against plain Python
    conventions (`except ValueError`) still catches it.
    """
